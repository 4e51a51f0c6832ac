"""R23: a claim can name the kinds it takes, so a worker claims only what it has handlers
for (W2). R05's order holds among those kinds; every other claim rule holds as well."""

from __future__ import annotations

import pytest

LEASE = 30


def ids(jobs):
    return [job.id for job in jobs]


def test_r23_claim_takes_only_the_named_kinds_in_claim_order(queue, clock):
    late = queue.enqueue("email", {}, delay=5).id
    report = queue.enqueue("report", {}, priority=-5).id
    early = queue.enqueue("email", {}, delay=1).id
    urgent = queue.enqueue("sms", {}, delay=9, priority=-1).id
    clock.advance(10)

    assert ids(queue.claim("w", limit=10, kinds=["email", "sms"])) == [urgent, early, late]
    assert queue.claim("w", limit=10, kinds=["email", "sms"]) == []
    assert ids(queue.claim("w", limit=10)) == [report]  # no kinds named: any kind


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("queues", [None, ["b"], ["a", "b"]])
def test_r23_every_claim_shape_with_kinds_writes_the_lease(queue, clock, limit, queues):
    wanted = queue.enqueue_many("wanted", [{"n": i} for i in range(2)], queue="b")
    other = queue.enqueue("other", {}, queue="b", priority=-1).id
    jobs = queue.claim("w", limit=limit, queues=queues, kinds=["wanted"])

    assert ids(jobs) == wanted[:limit]
    for job in jobs:
        snap = queue.get(job.id)
        assert (snap.state, snap.attempts, snap.worker) == ("running", 1, "w")
        assert snap.visible_at.timestamp() == clock.now + LEASE
    snap = queue.get(other)
    assert (snap.state, snap.attempts) == ("queued", 0)


def test_r23_a_kind_and_a_queue_filter_together(queue):
    queue.enqueue("email", {}, queue="b")
    wanted = queue.enqueue("email", {}, queue="a").id
    queue.enqueue("sms", {}, queue="a")
    assert ids(queue.claim("w", limit=10, queues=["a"], kinds=["email"])) == [wanted]


def test_r23_a_lease_run_out_is_claimed_again_only_by_its_kind(queue, clock):
    job_id = queue.enqueue("email", {}).id
    queue.claim("w", kinds=["email"])
    clock.advance(LEASE + 1)
    assert queue.claim("other-worker", kinds=["sms"]) == []
    [again] = queue.claim("w2", kinds=["email"])
    assert (again.id, again.attempts) == (job_id, 2)


def test_r23_r08_a_kinds_claim_still_retires_a_lease_lost_on_the_last_attempt(queue, clock):
    crashed = queue.enqueue("email", {}, max_attempts=1).id
    queue.claim("w")
    clock.advance(LEASE + 1)
    assert queue.claim("w", kinds=["sms"]) == []
    snap = queue.get(crashed)
    assert (snap.state, snap.last_error) == ("dead", "lease expired on the last attempt")


def test_r23_r22_kinds_must_name_something(queue):
    queue.enqueue("email", {})
    with pytest.raises(ValueError, match="kinds"):
        queue.claim("w", kinds=[])
    with pytest.raises(ValueError, match="kind"):
        queue.claim("w", kinds=[""])
    assert ids(queue.claim("w", kinds="email")) != []  # one kind as a plain string


def test_r23_r16_stats_count_live_jobs_per_kind(queue, clock):
    queue.enqueue_many("email", [{}] * 3, queue="a")
    queue.enqueue("email", {}, queue="b", delay=60)
    queue.enqueue("sales_report", {}, queue="b")
    clock.advance(4)
    queue.claim("w", kinds=["email"])
    done = queue.enqueue("tick", {}).id
    [job] = queue.claim("w", kinds=["tick"])
    assert job.id == done and queue.complete(job)

    kinds = queue.stats()["kinds"]
    assert kinds == {
        "email": {"queued": 3, "running": 1, "ready_now": 2, "oldest_ready_age_s": 4.0},
        "sales_report": {"queued": 1, "running": 0, "ready_now": 1, "oldest_ready_age_s": 4.0},
    }
