"""R05 to R08: which jobs a claim picks, what it writes, lease expiry, and the last attempt."""

from __future__ import annotations

from queuecore import Job
from queuecore.conformance.helpers import epoch, job_row
from queuecore.sql.statements import LEASE_EXPIRED_ON_LAST_ATTEMPT


def ids(jobs: list[Job]) -> list[int]:
    return [job.id for job in jobs]


def test_r05_claim_orders_by_priority_then_visible_at_then_id(queue, clock):
    now = clock.now
    low = queue.enqueue("k", {}, priority=5, run_at=now - 10).id
    late = queue.enqueue("k", {}, run_at=now - 1).id
    early = queue.enqueue("k", {}, run_at=now - 5).id
    early_too = queue.enqueue("k", {}, run_at=now - 5).id
    urgent = queue.enqueue("k", {}, priority=-1).id
    not_yet = queue.enqueue("k", {}, priority=-9, delay=10).id

    assert ids(queue.claim("w", limit=3)) == [urgent, early, early_too]
    assert ids(queue.claim("w", limit=10)) == [late, low]
    assert queue.claim("w", limit=10) == []
    clock.advance(10)
    assert ids(queue.claim("w", limit=10)) == [not_yet]


def test_r05_claim_takes_only_the_named_queues(queue):
    a = queue.enqueue("k", {}, queue="a").id
    b = queue.enqueue("k", {}, queue="b").id
    c = queue.enqueue("k", {}, queue="c", priority=-1).id
    d = queue.enqueue("k", {}, queue="d").id

    assert ids(queue.claim("w", queues=["b"], limit=10)) == [b]
    assert queue.claim("w", queues="nowhere", limit=10) == []
    assert ids(queue.claim("w", queues=["a", "c"], limit=10)) == [c, a]
    assert ids(queue.claim("w", limit=10)) == [d]


def test_r05_claim_returns_at_most_limit(queue, db):
    enqueued = queue.enqueue_many("k", [{"n": i} for i in range(5)])

    first = queue.claim("w", limit=2)
    assert ids(first) == enqueued[:2]
    assert [job_row(db, i)["state"] for i in enqueued] == ["running"] * 2 + ["queued"] * 3


def test_r06_claim_writes_running_attempt_lease_token_and_worker(make_queue, clock, db):
    queue = make_queue(lease_seconds=45)
    enqueued = queue.enqueue("email", {"to": "x"}, queue="mail", priority=2, max_attempts=3).id

    (job,) = queue.claim("worker-7", queues=["mail"])

    row = job_row(db, enqueued)
    assert row["state"] == "running"
    assert row["attempts"] == 1
    assert row["visible_at"] == clock.now + 45
    assert row["lease_token"] == job.lease_token
    assert row["worker"] == "worker-7"
    assert (job.id, job.kind, job.payload, job.queue) == (enqueued, "email", {"to": "x"}, "mail")
    assert (job.priority, job.attempts, job.max_attempts) == (2, 1, 3)
    assert epoch(job.lease_expires_at) == clock.now + 45
    assert len(bytes.fromhex(job.lease_token)) >= 16


def test_r06_every_claim_gets_a_new_token(queue):
    queue.enqueue_many("k", [{}] * 2)
    first, second = queue.claim("w"), queue.claim("w")
    assert first[0].lease_token != second[0].lease_token


def test_r07_running_job_is_invisible_until_its_lease_ends(make_queue, clock, db):
    queue = make_queue(lease_seconds=30)
    enqueued = queue.enqueue("k", {}).id
    (first,) = queue.claim("crashed")

    clock.advance(29.5)
    assert queue.claim("other") == []
    clock.advance(0.5)
    (second,) = queue.claim("other")

    assert second.id == enqueued
    assert second.attempts == 2
    assert second.lease_token != first.lease_token
    assert job_row(db, enqueued)["worker"] == "other"
    assert job_row(db, enqueued)["visible_at"] == clock.now + 30
    assert queue.complete(first) is False
    assert queue.complete(second) is True


def test_r07_expired_lease_takes_its_place_by_its_lease_end(make_queue, clock):
    queue = make_queue(lease_seconds=10)
    expired = queue.enqueue("k", {}).id
    queue.claim("crashed")
    clock.advance(5)
    younger = queue.enqueue("k", {}).id
    clock.advance(6)  # the lease ended 1 s ago, the younger job became ready 6 s ago

    assert ids(queue.claim("w", limit=2)) == [younger, expired]


def test_r08_crash_on_the_last_attempt_makes_the_job_dead(make_queue, clock, db):
    queue = make_queue(lease_seconds=30)
    last = queue.enqueue("k", {}, queue="mail", max_attempts=1).id
    (crashed,) = queue.claim("crashed")
    other = queue.enqueue("k", {}, queue="other").id

    clock.advance(29)
    assert ids(queue.claim("w", queues=["other"])) == [other]
    assert queue.get(last).state == "running"

    clock.advance(1)  # dead from the instant its lease ends, before any claim meets it
    snap = queue.get(last)
    assert (snap.state, snap.attempts) == ("dead", 1)
    assert snap.last_error == LEASE_EXPIRED_ON_LAST_ATTEMPT == "lease expired on the last attempt"
    assert epoch(snap.finished_at) == clock.now
    assert queue.claim("w") == []  # meets the row: writes it dead, hands nothing out
    row = job_row(db, last)
    assert (row["state"], row["last_error"], row["lease_token"]) == (
        "dead",
        LEASE_EXPIRED_ON_LAST_ATTEMPT,
        None,
    )
    assert (row["finished_at"], row["attempts"]) == (clock.now, 1)
    assert queue.get(last) == snap
    assert queue.complete(crashed) is False


def test_r08_a_claim_that_meets_lost_leases_hands_out_the_jobs_behind_them(queue, clock):
    """The dead rows a claim writes take no room from the jobs it hands out."""
    lost = [queue.enqueue("k", {}, max_attempts=1).id for _ in range(3)]
    assert ids(queue.claim("crashed", limit=3)) == lost
    clock.advance(31)
    ready = [queue.enqueue("k", {}).id for _ in range(3)]
    assert ids(queue.claim("w", limit=2)) == ready[:2]
    assert ids(queue.claim("w")) == ready[2:]
    assert [queue.get(i).state for i in lost] == ["dead"] * 3


def test_r08_expired_lease_with_attempts_left_is_claimed_again(make_queue, clock, db):
    queue = make_queue(lease_seconds=30)
    job_id = queue.enqueue("k", {}, max_attempts=2).id
    queue.claim("crashed")
    clock.advance(30)

    (again,) = queue.claim("w")
    assert (again.id, again.attempts) == (job_id, 2)
    clock.advance(30)
    assert queue.claim("w") == []
    assert job_row(db, job_id)["state"] == "dead"


def test_r08_reports_after_a_lease_lost_on_the_last_attempt_change_nothing(queue, clock):
    """Reads say dead from the lease's end, so a report arriving later, before any claim
    met the row, must not turn it into anything else (dead is not done)."""
    job_id = queue.enqueue("k", {}, max_attempts=1).id
    [job] = queue.claim("w")
    clock.advance(31)
    assert queue.heartbeat(job) is False
    assert queue.complete(job) is False
    assert queue.complete_many([job]) == [False]
    assert queue.fail(job, "late") is None
    assert queue.release(job) is False
    snap = queue.get(job_id)
    assert (snap.state, snap.last_error) == ("dead", LEASE_EXPIRED_ON_LAST_ATTEMPT)


def test_r08_dead_list_requeue_and_purge_see_an_unwritten_dead_state(queue, clock, db):
    """No claim ever meets these rows (nothing claims their queue): every operation on
    dead jobs must still see them dead, finished when their leases ended."""
    first = queue.enqueue("k", {}, queue="idle", max_attempts=1).id
    second = queue.enqueue("k", {}, queue="idle", max_attempts=1).id
    queue.claim("w", limit=2)
    clock.advance(30)
    assert job_row(db, first)["state"] == "running"  # not written: nobody met it
    assert [s.id for s in queue.dead_jobs()] == [second, first]
    assert [s.id for s in queue.dead_jobs("idle")] == [second, first]
    assert queue.stats("idle")["dead"] == 2 and queue.stats("idle")["running"] == 0
    assert queue.requeue_dead([first]) == [first]
    assert (queue.get(first).state, queue.get(first).attempts) == ("queued", 0)
    clock.advance(10)
    assert queue.purge(older_than=11, states=("dead",)) == 0  # it finished 10 s ago
    assert queue.purge(older_than=9, states=("dead",)) == 1
    assert queue.get(second) is None
