"""R15 to R18: what an operator does with the queue: requeue the dead, read stats,
purge finished jobs, look one job up."""

from __future__ import annotations

import dataclasses

import pytest

from queuecore import Queue
from queuecore.conformance.helpers import all_rows, capture_sql, count_jobs, epoch, job_row


def make_dead(queue: Queue, n: int, queue_name: str = "default") -> list[int]:
    """n jobs failed permanently, in id order."""
    ids = queue.enqueue_many("k", [{"n": i} for i in range(n)], queue=queue_name)
    for job in queue.claim("w", limit=n, queues=[queue_name]):
        queue.fail(job, "broken", permanent=True)
    return ids


def test_r15_requeue_dead_by_id_touches_only_those(queue, clock, db):
    second = make_dead(queue, 2)[1]
    make_dead(queue, 1, "other")
    queue.enqueue("k", {})
    (done,) = queue.claim("w")
    queue.complete(done)
    queue.enqueue("k", {}, queue="live")
    queue.claim("w", queues=["live"])
    clock.advance(60)
    before = all_rows(db)

    assert queue.requeue_dead(ids=[second, done.id, 999_999]) == [second]
    after = all_rows(db)
    row = after.pop(second)
    assert (row["state"], row["attempts"], row["finished_at"]) == ("queued", 0, None)
    assert row["visible_at"] == clock.now
    del before[second]
    assert after == before
    assert queue.requeue_dead(ids=[]) == []
    assert [job.id for job in queue.claim("w", queues=["default"])] == [second]


def test_r15_requeue_all_dead(queue, clock, db):
    dead = make_dead(queue, 2) + make_dead(queue, 1, "other")

    assert queue.requeue_dead() == sorted(dead)
    assert {job_row(db, i)["state"] for i in dead} == {"queued"}
    assert queue.requeue_dead() == []


def test_r16_stats_per_queue_and_overall(make_queue, clock):
    queue = make_queue(lease_seconds=30)
    start = clock.now
    queue.enqueue("k", {}, queue="a", run_at=start - 100)  # ready
    queue.enqueue("k", {}, queue="a", delay=50)  # not yet
    make_dead(queue, 2, "d")
    queue.enqueue("k", {}, queue="c")
    queue.complete(queue.claim("w", queues=["c"])[0])
    queue.enqueue("k", {}, queue="b", run_at=start - 10)  # stays queued, ready
    queue.enqueue("k", {}, queue="b", run_at=start - 20)  # claimed second, lease live
    queue.enqueue("k", {}, queue="b", run_at=start - 30, max_attempts=1)  # dead by R08
    queue.enqueue("k", {}, queue="b", run_at=start - 40)  # lease ends, claimable again
    queue.claim("w", queues=["b"], limit=2)
    clock.advance(10)
    started = queue.claim("w", queues=["b"], limit=1)
    assert queue.mark_started(started) == 1  # W9: its handler runs; the others are held
    clock.advance(25)  # the first two leases ended 5 s ago, the third one is live

    empty = {
        "queued": 0,
        "running": 0,
        "held_ahead": 0,
        "ready_now": 0,
        "oldest_ready_age_s": 0.0,
        "dead": 0,
        "cancelled": 0,
    }
    a = {**empty, "queued": 2, "ready_now": 1, "oldest_ready_age_s": 135.0}
    # The lease that ended on its last attempt counts as dead from that instant (R08).
    b = {
        **empty,
        "queued": 1,
        "running": 2,
        "held_ahead": 1,
        "ready_now": 2,
        "oldest_ready_age_s": 45.0,
        "dead": 1,
    }
    d = {**empty, "dead": 2}
    assert [queue.stats(queue=name) for name in "abcd"] == [a, b, empty, d]
    assert queue.stats(queue="nowhere") == empty
    overall = queue.stats()
    assert overall.pop("queues") == {"a": a, "b": b, "d": d}
    live = {key: overall[key] for key in ("queued", "running", "ready_now", "oldest_ready_age_s")}
    assert overall.pop("kinds") == {"k": live}  # R23: one kind, every live job
    assert overall == {
        "queued": 3,
        "running": 2,
        "held_ahead": 1,
        "ready_now": 3,
        "oldest_ready_age_s": 135.0,
        "dead": 3,
        "cancelled": 0,
    }


def test_r16_ready_now_counts_expired_leases(make_queue, clock):
    queue = make_queue(lease_seconds=30)
    queue.enqueue("k", {})
    queue.claim("crashed")
    assert queue.stats()["ready_now"] == 0

    clock.advance(35)
    stats = queue.stats()
    assert (stats["running"], stats["ready_now"], stats["oldest_ready_age_s"]) == (1, 1, 5.0)


def test_r17_purge_deletes_old_finished_jobs_only(queue, clock, db):
    old_done = queue.enqueue_many("k", [{}] * 3)
    for job in queue.claim("w", limit=3):
        queue.complete(job)
    old_dead = make_dead(queue, 1)
    long_queued = queue.enqueue("k", {}, queue="q").id
    long_running = queue.enqueue("k", {}, queue="r").id
    queue.claim("w", queues=["r"])
    clock.advance(100)
    queue.enqueue("k", {})
    (young,) = queue.claim("w", queues=["default"])
    queue.complete(young)
    clock.advance(1)

    assert queue.purge(older_than=50) == 3
    assert {job_row(db, i) for i in old_done} == {None}
    assert queue.purge(older_than=50, states=("done", "dead")) == 1
    assert job_row(db, old_dead[0]) is None
    assert queue.purge(older_than=0, states=("done", "dead")) == 1
    assert set(all_rows(db)) == {long_queued, long_running}
    with pytest.raises(ValueError, match="states"):
        queue.purge(states=("queued",))
    assert set(all_rows(db)) == {long_queued, long_running}


def test_r17_purge_works_in_bounded_batches(queue, clock, db):
    queue.enqueue_many("k", [{}] * 5)
    for job in queue.claim("w", limit=5):
        queue.complete(job)
    clock.advance(10)
    with capture_sql() as sent:
        assert queue.purge(older_than=5, batch=2) == 5

    # 2 + 2 + 1 rows, one short transaction each
    steps = [sql.split()[0] for sql, _ in sent if not sql.startswith("BEGIN")]
    assert steps == ["DELETE", "COMMIT"] * 3
    assert count_jobs(db) == 0


def test_r18_get_returns_a_snapshot_or_none(queue, clock):
    job_id = queue.enqueue("email", {"to": "a"}, queue="mail", priority=1, dedupe_key="k1").id
    (job,) = queue.claim("w-1")
    queue.fail(job, "smtp down")  # backoff 1 s with rng 1.0
    snap = queue.get(job_id)

    assert dataclasses.asdict(snap) == {
        "id": job_id,
        "kind": "email",
        "queue": "mail",
        "payload": {"to": "a"},
        "priority": 1,
        "state": "queued",
        "attempts": 1,
        "max_attempts": 5,
        "last_error": "smtp down",
        "worker": "w-1",
        "dedupe_key": "k1",
        "created_at": snap.created_at,
        "visible_at": snap.visible_at,
        "finished_at": None,
        "result": None,
        "errors": [{"attempt": 1, "at": snap.created_at, "error": "smtp down"}],
        "started_at": None,  # never handed to a slot (W9)
    }
    assert (epoch(snap.created_at), epoch(snap.visible_at)) == (clock.now, clock.now + 1)
    clock.advance(1)
    queue.complete(queue.claim("w-2")[0])
    assert snap.state == "queued"  # a snapshot, not a live view
    assert epoch(queue.get(job_id).finished_at) == clock.now
    assert queue.get(job_id + 1) is None


def test_r18_a_purged_id_is_never_handed_out_again(queue, clock):
    """Otherwise a status endpoint holding an old id would show somebody else's job."""
    queue.enqueue("k", {})
    newest = queue.enqueue("k", {}).id
    for job in queue.claim("w", limit=2):
        queue.complete(job)
    clock.advance(10)
    assert queue.purge(older_than=0) == 2

    assert queue.enqueue("k", {}).id > newest
    assert queue.get(newest) is None
