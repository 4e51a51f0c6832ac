"""The transaction programs of `queuecore.core.operations`: what an operation sends inside one
transaction, as a generator of requests (`queuecore.core.plans`), with no I/O of its own.
Each executor answers the requests on its own connection (`SQLQueue`, `AsyncQueue`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queuecore.core import shaping
from queuecore.core.plans import INVALIDATED, CallEffect, Plans, Program, Run, Savepoint, Tx
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot

if TYPE_CHECKING:
    from sqlalchemy import CursorResult

    from queuecore.core.operations import Operations


def changed_one(run: Run) -> Program[bool]:
    result: CursorResult[Any] = yield run
    return result.rowcount == 1


def cancel(ops: Operations, run: Run, job_id: int) -> Program[bool]:
    """R25, and W9: a cancel that changed the job tells the workers at its commit, where
    the database can notify (PostgreSQL), so a handler hears it at once."""
    result: CursorResult[Any] = yield run
    if result.rowcount != 1:
        return False
    for announce in ops.backend.announce_cancel(job_id):
        yield Run(*announce)
    return True


def insert_deduplicated(ops: Operations, stmt: Any, row: dict[str, Any]) -> Program[EnqueueResult]:
    # The existing row may be purged between the two statements: then insert again.
    while True:
        new_id = yield from _insert_unless_taken(ops, stmt, row)
        if new_id is not None:
            for announce in ops.backend.announce(row["queue"]):
                yield Run(*announce)
            return EnqueueResult(id=new_id, created=True)
        lookup = {"dedupe_key": row["dedupe_key"]}
        existing = (yield Run(ops.stmt_dedupe_lookup, lookup)).first()
        if existing is not None:
            shaping.same_work(row, existing)
            return EnqueueResult(id=existing.id, created=False)


def _insert_unless_taken(ops: Operations, stmt: Any, row: dict[str, Any]) -> Program[int | None]:
    """The new job's id, or None when its dedupe key is taken. Where a conflicting insert
    cannot be skipped (MariaDB), the plain insert runs in a savepoint, rolled back when
    the key was taken: the caller's transaction (R03) goes on, with nothing of it left."""
    if ops.backend.skips_conflicting_inserts:
        new_id: int | None = (yield Run(stmt, ops.params(**row))).scalar()
        return new_id
    yield Savepoint.BEGIN
    try:
        new_id = (yield Run(stmt, ops.params(**row))).scalar_one()
    except Exception as error:
        yield Savepoint.ROLLBACK
        if not ops.backend.is_duplicate_key(error):
            raise
        return None
    yield Savepoint.COMMIT
    return new_id


def insert_many(ops: Operations, params: list[dict[str, Any]], queue: str) -> Program[list[int]]:
    ids = list((yield Run(ops.stmt_enqueue_many, params)).scalars())
    for announce in ops.backend.announce(queue):
        yield Run(*announce)
    return ids


def complete_with_effect(ops: Operations, job: Job, effect: Any, result: Any) -> Program[bool]:
    if (yield ops.complete_on(job, result)).rowcount != 1:
        return False
    yield CallEffect(effect)
    return True


def complete_each(
    ops: Operations, batch: list[Job], effects: list[Any], values: list[Any]
) -> Program[Completions]:
    outcome = Completions()
    for index, (job, effect, result) in enumerate(zip(batch, effects, values, strict=True)):
        if effect is None:
            outcome.append((yield ops.complete_on(job, result)).rowcount == 1)
            continue
        yield Savepoint.BEGIN
        if (yield ops.complete_on(job, result)).rowcount != 1:
            yield Savepoint.ROLLBACK
            outcome.append(False)
            continue
        try:
            yield CallEffect(effect)
        except Exception as error:
            if (yield INVALIDATED):  # the connection died under the effect: not its fault
                raise
            yield Savepoint.ROLLBACK
            outcome.errors[index] = error
            outcome.append(False)
        else:
            yield Savepoint.COMMIT
            outcome.append(True)
    return outcome


def complete_picked(ops: Operations, batch: list[Job]) -> Program[Completions]:
    """R09 for many jobs in two statements, where an UPDATE returns nothing: the fences
    are read under row locks, then the rows whose fence passed are completed by id. The
    same claim listed twice completes once, as two calls to complete() would."""
    ids = sorted({job.id for job in batch})
    held = {tuple(row) for row in (yield Run(ops.stmt_complete_pick, ops.params(job_ids=ids)))}
    outcome = Completions()
    for job in batch:
        fence = (job.id, job.lease_token)
        outcome.append(fence in held)
        held.discard(fence)
    passed = [job.id for job, done in zip(batch, outcome, strict=True) if done]
    if passed:
        yield Run(ops.stmt_complete_picked, ops.params(picked=passed))
    return outcome


def requeue(
    ops: Operations, stmt: Any, params: dict[str, Any], pick: Any = None
) -> Program[list[int]]:
    """`pick`: where an UPDATE returns nothing, the ids are read (and locked) first."""
    yield Run(ops.stmt_retire, ops.params())  # R08's dead, written first
    if pick is None:
        return sorted((yield Run(stmt, params)).scalars())
    picked = sorted((yield Run(pick, params)).scalars())
    if picked:
        yield Run(stmt, {**params, "picked": picked})
    return picked


def count(ops: Operations, queue: str | None) -> Program[dict[str, Any]]:
    live = (yield Run(ops.stmt_live_counts, ops.params())).all()
    dead = (yield Run(ops.stmt_dead_counts)).all()
    cancelled = (yield Run(ops.stmt_cancelled_counts)).all()
    return shaping.stats(live, dead, cancelled, queue)


def purge_batches(ops: Operations, names: list[str], older_than: float, batch: int) -> Plans[int]:
    total = 0
    for name in names:
        while True:
            deleted = yield Tx(purge_one(ops, name, older_than, batch))
            total += deleted
            if deleted < batch:
                break
    return total


def purge_one(ops: Operations, name: str, older_than: float, batch: int) -> Program[int]:
    if name == "dead":  # R08's dead, written first
        yield Run(ops.stmt_retire, ops.params())
    params = ops.params(older_than=older_than, batch=batch)
    result: CursorResult[Any] = yield Run(ops.stmt_purge[name], params)
    return result.rowcount


def read_now(ops: Operations) -> Program[float]:
    return float((yield Run(ops.stmt_now)).scalar_one())


def get(ops: Operations, params: dict[str, Any]) -> Program[JobSnapshot | None]:
    row = (yield Run(ops.stmt_get, params)).first()
    return None if row is None else shaping.snapshot(row)


def snapshots(ops: Operations, stmt: Any, params: dict[str, Any]) -> Program[list[JobSnapshot]]:
    return [shaping.snapshot(row) for row in (yield Run(stmt, params))]
