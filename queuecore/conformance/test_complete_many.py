"""complete_many: R09's fence and R10's effects, for many jobs in one transaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.harness import Harness

LEASE = 30


class Abort(BaseException):
    """Not an Exception: it must roll the whole batch back, as it would a single complete."""


@pytest.fixture
def side_table(harness: Harness, dsn: str) -> Iterator[sa.Table]:
    """A table of the application's own, for effects to write to."""
    table = sa.Table("effect_rows", sa.MetaData(), sa.Column("job_id", sa.Integer))
    engine = harness.engine(dsn)
    with engine.begin() as conn:
        table.drop(conn, checkfirst=True)
        table.create(conn)
    yield table
    with engine.begin() as conn:
        table.drop(conn)
    engine.dispose()


def _claimed(queue: queuecore.Queue, count: int) -> list[queuecore.Job]:
    queue.enqueue_many("k", [{"n": i} for i in range(count)])
    return queue.claim("w", limit=count)


def _rows(queue: queuecore.Queue, table: sa.Table) -> list[int]:
    with queue.engine.connect() as conn:
        return sorted(conn.execute(sa.select(table.c.job_id)).scalars())


def _insert(table: sa.Table, job: queuecore.Job) -> queuecore.Effect:
    return lambda conn: conn.execute(table.insert().values(job_id=job.id))


def test_r09_complete_many_completes_each_job_and_answers_in_order(queue, clock):
    jobs = _claimed(queue, 3)
    clock.advance(2)
    assert queue.complete_many(list(reversed(jobs))) == [True, True, True]
    for job in jobs:
        snap = queue.get(job.id)
        assert snap.state == "done"
        assert snap.finished_at.timestamp() == clock.now


def test_r09_complete_many_rejects_stale_tokens_one_by_one(queue, clock):
    stale, kept = _claimed(queue, 2)
    clock.advance(LEASE + 1)
    [fresh] = queue.claim("other", limit=1)  # the lease of `stale` ran out; it is re-claimed
    assert fresh.id == stale.id
    assert queue.complete_many([stale, kept]) == [False, True]
    snap = queue.get(stale.id)
    assert snap.state == "running" and snap.attempts == 2 and snap.worker == "other"
    assert queue.complete(fresh)


def _one_taken_over(
    queue: queuecore.Queue, clock: Any, count: int
) -> tuple[list[queuecore.Job], queuecore.Job]:
    """`count` jobs claimed by "w", the third's lease then taken by another claim: the
    jobs as "w" holds them (the third stale, every other claimed again), and the third
    as the other claim holds it."""
    jobs = _claimed(queue, count)
    clock.advance(LEASE + 1)
    taken = queue.claim("other", limit=count)  # every lease ran out
    assert sorted(job.id for job in taken) == sorted(job.id for job in jobs)
    for job in taken:
        if job.id != jobs[2].id:
            queue.release(job)
    again = {job.id: job for job in queue.claim("w", limit=count)}
    assert len(again) == count - 1
    [fresh] = [job for job in taken if job.id == jobs[2].id]
    return [again.get(job.id, job) for job in jobs], fresh


def test_r09_complete_many_answers_each_job_of_a_large_batch_in_order(queue, clock):
    """Eleven jobs, one of them stale: a batch whose size is no power of two, as a
    backend that binds its fences at a few sizes pads it."""
    batch, _ = _one_taken_over(queue, clock, 11)
    assert queue.complete_many(batch) == [True, True, False] + [True] * 8
    states = [queue.get(job.id).state for job in batch]
    assert states == ["done", "done", "running"] + ["done"] * 8


def test_r09_complete_many_of_one_job_under_two_claims_completes_the_current_one(queue, clock):
    batch, fresh = _one_taken_over(queue, clock, 11)
    completed = queue.complete_many([*batch, fresh])  # the stale claim listed first
    assert completed == [True, True, False] + [True] * 8 + [True]
    assert all(queue.get(job.id).state == "done" for job in batch)


def test_r09_complete_many_never_completes_a_job_twice(queue):
    [job] = _claimed(queue, 1)
    assert queue.complete_many([job, job]) == [True, False]
    assert queue.complete_many([job]) == [False]


def test_r08_complete_many_refuses_a_job_whose_lease_ran_out_on_its_last_attempt(queue, clock):
    # Its token still matches: only the lease's end on the last attempt fences it off.
    queue.enqueue("k", {}, max_attempts=1)
    queue.enqueue("k", {})
    last, other = queue.claim("w", limit=2)
    clock.advance(LEASE + 1)
    assert queue.complete_many([last, other]) == [False, True]
    assert queue.get(last.id).state == "dead"
    assert queue.get(other.id).state == "done"


def test_r09_complete_many_of_nothing_is_nothing(queue):
    assert queue.complete_many([]) == []
    assert queue.complete_many([], effects=[]) == []


def test_r10_each_effect_runs_in_its_own_savepoint(queue, side_table):
    first, failing, last = _claimed(queue, 3)

    def boom(conn: sa.Connection) -> None:
        conn.execute(side_table.insert().values(job_id=failing.id))
        raise RuntimeError("effect failed")

    effects = [_insert(side_table, first), boom, _insert(side_table, last)]
    results = queue.complete_many([first, failing, last], effects=effects)
    assert results == [True, False, True]
    assert list(results.errors) == [1]
    assert str(results.errors[1]) == "effect failed"
    assert _rows(queue, side_table) == sorted([first.id, last.id])
    snap = queue.get(failing.id)
    assert snap.state == "running"
    assert snap.visible_at == failing.lease_expires_at
    assert queue.complete(failing)  # its claim still holds it


def test_r10_complete_many_never_calls_the_effect_of_a_stale_job(queue, clock, side_table):
    [job] = _claimed(queue, 1)
    clock.advance(LEASE + 1)
    queue.claim("other")
    called = []
    results = queue.complete_many([job], effects=[lambda conn: called.append(conn)])
    assert results == [False] and results.errors == {}
    assert called == []


def test_r10_complete_many_takes_none_for_jobs_without_an_effect(queue, side_table):
    plain, with_effect = _claimed(queue, 2)
    results = queue.complete_many(
        [plain, with_effect], effects=[None, _insert(side_table, with_effect)]
    )
    assert results == [True, True]
    assert _rows(queue, side_table) == [with_effect.id]


def test_r10_a_base_exception_rolls_the_whole_batch_back(queue, side_table):
    first, second = _claimed(queue, 2)

    def abort(conn: sa.Connection) -> None:
        raise Abort()

    with pytest.raises(Abort):
        queue.complete_many([first, second], effects=[_insert(side_table, first), abort])
    assert _rows(queue, side_table) == []
    assert [queue.get(j.id).state for j in (first, second)] == ["running", "running"]


def test_r22_complete_many_wants_one_effect_entry_per_job(queue, side_table):
    jobs = _claimed(queue, 2)
    with pytest.raises(ValueError, match="one entry"):
        queue.complete_many(jobs, effects=[None])
    assert [queue.get(j.id).state for j in jobs] == ["running", "running"]


def test_complete_many_is_part_of_the_protocol(queue):
    assert isinstance(queue, queuecore.Queue)
    assert callable(queuecore.Queue.complete_many)
