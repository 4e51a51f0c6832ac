"""The claim is compiled per shape (one job or many, all queues or a list): each shape
must keep R05-R08. SQLite's many-job claim restores the order differently from
PostgreSQL's (it lists the order first): both must give R05's order. Every shape says
when each job became ready (`Job.ready_at`, issue 14's time in queue)."""

from __future__ import annotations

import pytest

from queuecore.conformance.fixtures import START
from queuecore.job import to_datetime

LEASE = 30


@pytest.mark.parametrize("queues", [None, ["a", "b"]])
def test_r05_a_batch_claim_comes_back_in_priority_then_visible_at_then_id_order(
    queue, clock, queues
):
    late = queue.enqueue("k", {}, queue="a", delay=5).id
    early = queue.enqueue("k", {}, queue="b", delay=1).id
    urgent = queue.enqueue("k", {}, queue="a", delay=9, priority=-1).id
    same_time = queue.enqueue("k", {}, queue="b", delay=5).id
    clock.advance(10)
    assert [j.id for j in queue.claim("w", limit=10, queues=queues)] == [
        urgent,
        early,
        late,
        same_time,
    ]


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("queues", [None, ["b"], ["a", "b", "c"]])
def test_r06_every_claim_shape_writes_the_lease(queue, clock, limit, queues):
    queue.enqueue_many("k", [{"n": i} for i in range(2)], queue="b")
    jobs = queue.claim("w", limit=limit, queues=queues)
    assert len(jobs) == min(limit, 2)
    assert len({j.lease_token for j in jobs}) == 1
    for job in jobs:
        snap = queue.get(job.id)
        assert (snap.state, snap.attempts, snap.worker) == ("running", 1, "w")
        assert snap.visible_at.timestamp() == clock.now + LEASE == job.lease_expires_at.timestamp()
        assert job.payload == {"n": job.id - 1}


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("queues", [None, ["elsewhere"]])
def test_r08_every_claim_shape_retires_a_lease_lost_on_the_last_attempt(
    queue, clock, limit, queues
):
    crashed = queue.enqueue("k", {}, max_attempts=1).id
    queue.claim("w")
    clock.advance(LEASE + 1)
    assert queue.claim("w", limit=limit, queues=queues) == []
    snap = queue.get(crashed)
    assert snap.state == "dead"
    assert snap.last_error == "lease expired on the last attempt"


def test_r13_r14_hot_path_reports_keep_their_fence(queue, clock):
    [job] = (queue.enqueue("k", {}), queue.claim("w"))[1]
    clock.advance(5)
    assert queue.heartbeat(job)
    assert job.lease_expires_at.timestamp() == clock.now + LEASE
    assert queue.release(job)
    assert not queue.heartbeat(job)
    assert not queue.release(job)
    assert queue.fail(job, "late") is None
    assert queue.get(job.id).attempts == 0


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("queues", [None, ["a"]])
def test_every_claim_shape_returns_the_visible_at_it_found_as_ready_at(queue, clock, limit, queues):
    """The enqueue, a retry's backoff's end, a lost lease's end, a delay's end: the
    claim overwrites visible_at with its lease's end, and returns the old one."""
    retried = queue.enqueue("k", {}, queue="a", priority=-2).id
    [job] = queue.claim("w")
    assert queue.fail(job, "once", retry_in=2) == "queued"
    lost = queue.enqueue("k", {}, queue="a", priority=-1).id
    assert [j.id for j in queue.claim("w")] == [lost]  # its lease ends at START + 30
    fresh = queue.enqueue("k", {}, queue="a").id
    delayed = queue.enqueue("k", {}, queue="a", delay=5).id
    clock.advance(LEASE + 10)
    ready = {}
    while claimed := queue.claim("w", limit=limit, queues=queues):
        ready.update({j.id: j.ready_at for j in claimed})
    assert ready == {
        retried: to_datetime(START + 2),
        lost: to_datetime(START + LEASE),
        fresh: to_datetime(START),
        delayed: to_datetime(START + 5),
    }
