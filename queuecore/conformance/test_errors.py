"""R32: a job keeps every failed attempt (the last 20), oldest first, each with its
attempt, when it failed and the error cut as R11 cuts it; R08's lost lease is one too."""

from __future__ import annotations

from queuecore.core.validate import ERROR_TEXT_LIMIT
from queuecore.job import to_datetime
from queuecore.sql.statements import LEASE_EXPIRED_ON_LAST_ATTEMPT


def test_r32_every_failed_attempt_is_kept_oldest_first(make_queue, clock):
    queue = make_queue(lease_seconds=30)
    job_id = queue.enqueue("k", {}, max_attempts=3).id
    assert queue.get(job_id).errors == []
    times = []
    for error, way in (("timeout", "retry"), ("x" * 5000, "retry"), ("refused", "dead")):
        [job] = queue.claim("w")
        clock.advance(2)
        times.append(to_datetime(clock.now))
        assert queue.fail(job, error, retry_in=0) == ("queued" if way == "retry" else "dead")
    snap = queue.get(job_id)
    assert snap.errors == [
        {"attempt": 1, "at": times[0], "error": "timeout"},
        {"attempt": 2, "at": times[1], "error": "x" * ERROR_TEXT_LIMIT},
        {"attempt": 3, "at": times[2], "error": "refused"},
    ]
    assert snap.last_error == "refused" and snap.errors[0]["at"].utcoffset().total_seconds() == 0
    assert queue.requeue_dead([job_id]) == [job_id]
    assert len(queue.get(job_id).errors) == 3  # a second round adds to the same history


def test_r32_only_the_last_twenty_are_kept(queue, clock):
    job_id = queue.enqueue("k", {}, max_attempts=30).id
    for _ in range(23):
        [job] = queue.claim("w")
        queue.fail(job, f"attempt {job.attempts}", retry_in=0)
    errors = queue.get(job_id).errors
    assert [e["attempt"] for e in errors] == list(range(4, 24))
    assert errors[-1]["error"] == "attempt 23"


def test_r32_a_lease_lost_on_the_last_attempt_is_its_last_entry(queue, clock):
    """R08: read before it is written, and once a claim (or requeue_dead) wrote it."""
    job_id = queue.enqueue("k", {}, max_attempts=2).id
    queue.fail(queue.claim("w")[0], "boom", retry_in=0)
    [job] = queue.claim("w")
    clock.advance(queue.lease_seconds)
    ended = to_datetime(job.lease_expires_at.timestamp())
    lost = {"attempt": 2, "at": ended, "error": LEASE_EXPIRED_ON_LAST_ATTEMPT}
    assert [e["error"] for e in queue.get(job_id).errors] == ["boom", lost["error"]]
    assert queue.get(job_id).errors[-1] == lost
    assert queue.list_jobs(state="dead")[0].errors[-1] == lost
    queue.requeue_dead()  # writes the dead state first, then requeues
    assert queue.get(job_id).errors[-1] == lost and len(queue.get(job_id).errors) == 2
