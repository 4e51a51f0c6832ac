"""The claim in steps, for a database whose locking read locks every row its scan walks
past, not only the rows it returns (InnoDB: `Backend.locks_rows_it_walks_past`).

There a claim of one locking statement would hold, until it commits, the running jobs
ahead of the ready ones in the index, and their holders' heartbeats and completions
would wait for it (ADR 0012, measured). So, in one transaction: the candidates are read
in claim order without locks; the first of them still due are locked by id, in that
order, skipping any another claim holds, and read whole with the clock, since such a
database has no UPDATE … RETURNING; then written (R06, or dead by R08) from what was
read. Two claimers that read the same candidates do not both come back empty-handed:
the second locks the next ones, and one that found too few reads on past them, so a
claim is empty only when nothing it may take is ready.

Claims that had to read on read more candidates for a while, and if they still have
to, take turns (`Contention`, where the backend has turns: `Tx.turn`): side by side,
large claims read the head of the queue another had locked and read on, round after
round.

The program asks for compiled statements only (`RunCompiled`), so the queue runs it on
the hot path's own driver connection: SQLAlchemy's execution path cost more client time
per claim than the driver and the server's answer (issue 29). Lists of ids are bound one
parameter each, in statements compiled per size (`queuecore.core.sized`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Double,
    Integer,
    bindparam,
    literal_column,
    null,
    select,
    union_all,
    update,
)
from sqlalchemy.sql import ClauseElement

from queuecore.core.plans import Program, RunCompiled
from queuecore.core.shaping import ATTEMPTS, ID, MAX_ATTEMPTS, STATE, VISIBLE_AT, claimed_jobs
from queuecore.core.sized import bucket, listed, listed_as_rows
from queuecore.sql.schema import RUNNING, jobs
from queuecore.sql.statements import JOB_COLUMNS, Now, Walk, dead_values, due, filtered

if TYPE_CHECKING:
    from queuecore.job import Job
    from queuecore.sql.compiled import Compiled

#: Candidates read beyond the claim's size, once claims have met (`Contention`), for the
#: rows concurrent claims lock or take first. Four workers' claimers move the head of
#: the queue by dozens of rows between one claim's read and its lock; with 8 a claim
#: read again 1.9 times as often as with 40, and four processes drained 16 to 28% fewer
#: jobs a second (issue 29, measured).
MARGIN = 40

#: Where the locked rows hold the clock's reading (after `state`).
NOW = len(JOB_COLUMNS) + 1


class Contention:
    """How much a queue's claims have had to read again lately: the candidates they read
    were locked or taken by other claims before they locked them, and too few were left.

    A claim of a queue whose claims have not met reads as many candidates as it wants
    jobs; once one had to read again, they read MARGIN more for RECENT_SECONDS; and once
    one had to read again despite the margin (large claims side by side: a busy worker's
    batches), they take turns (`Tx.turn`) for as long. Each step costs more per claim
    than the one before, so a lone claimer pays for none, and small claims beside each
    other pay for the margin only (the margin covers them: in turns they waited for
    each other instead, and drained fewer jobs, issue 29)."""

    #: Long enough that a queue which needs the margin or turns looks again rarely;
    #: each look costs a claim that has to read again.
    RECENT_SECONDS = 10.0

    def __init__(self) -> None:
        self._read_again_at: float | None = None
        self._despite_margin_at: float | None = None

    def read_again(self, margin: int) -> None:
        """A claim had to read again, having read `margin` candidates beyond its size."""
        now = time.monotonic()
        self._read_again_at = now
        if margin:
            self._despite_margin_at = now

    def margin(self) -> int:
        """How many candidates a claim reads beyond its size."""
        return MARGIN if _within(self._read_again_at, self.RECENT_SECONDS) else 0

    def turns(self) -> bool:
        """Whether claims take turns."""
        return _within(self._despite_margin_at, self.RECENT_SECONDS)


def _within(at: float | None, seconds: float) -> bool:
    return at is not None and time.monotonic() - at < seconds


def _bound(name: str, size: int) -> list[Any]:
    return [bindparam(f"{name}_{i}", type_=BigInteger) for i in range(size)]


class ClaimSteps:
    """The statements of one claim shape (queues and kinds filters as `picked`'s), each
    compiled on first use for the size of its lists of ids."""

    def __init__(
        self,
        compile: Callable[[ClauseElement], Compiled],
        now: Now,
        walk: Walk,
        queue_count: int | None,
        kind_count: int | None,
    ) -> None:
        self._compile = compile
        self._now, self._walk = now, walk
        self._queue_count, self._kind_count = queue_count, kind_count
        self._compiled: dict[tuple[str, int], Compiled] = {}

    def candidates(self, passed: int) -> Compiled:
        """The due ids in claim order (`wanted` of them, after those `passed_0` … that
        an earlier round of the claim read; none with `passed` 0), read without locks."""
        return self._sized("candidates", passed, self._candidates)

    def lock(self, ids: int) -> Compiled:
        """Of the ids `id_0` … (`listed_as_rows`), the first `limit` still due in their
        order, locked, skipping those another claim holds, read whole with the clock's
        reading. By id, never by a walk of the claim-order index: the optimizer took that
        walk for the ORDER BY ... LIMIT once the table had churned, and a locking read
        locks what it walks past (403 rows examined a lock with 4 workers, against 13
        with one). The ids are a list joined first (STRAIGHT_JOIN), sorted by their
        place before the join, so the join stops at `limit`: filtered and sorted after
        the rows were read, every due one was locked, and a second claim of the same
        candidates found all of them held (issue 29)."""
        return self._sized("lock", ids, self._lock)

    def write_dead(self, ids: int) -> Compiled:
        """R08: the locked rows whose lease ended on their last attempt, written dead."""
        return self._sized("write_dead", ids, self._write_dead)

    def write_claimed(self, ids: int) -> Compiled:
        """R06: the locked rows, claimed. Each column is read before it is set
        (`ordered_values`): MariaDB applies SET assignments one after another."""
        return self._sized("write_claimed", ids, self._write_claimed)

    def _sized(self, name: str, size: int, build: Callable[[int], ClauseElement]) -> Compiled:
        compiled = self._compiled.get((name, size))
        if compiled is None:
            compiled = self._compiled[(name, size)] = self._compile(build(size))
        return compiled

    def _candidates(self, passed: int) -> ClauseElement:
        stmt = select(jobs.c.id).where(due(self._now, self._walk))
        if passed:
            stmt = stmt.where(jobs.c.id.not_in(_bound("passed", passed)))
        stmt = filtered(stmt, self._queue_count, self._kind_count)
        return stmt.order_by(*self._walk.order).limit(bindparam("wanted"))

    def _lock(self, ids: int) -> ClauseElement:
        # One SELECT a candidate, joined by UNION ALL. `VALUES` is shorter, but MariaDB
        # needs it as a CTE with its columns named, which SQLAlchemy 2.0.30 (the lowest
        # this project allows) cannot make of a `values()`; written as text instead, it
        # measured no faster on the server (issue 29, benchmarks/README.md).
        listed = union_all(
            *(
                select(literal_column(str(i), Integer).label("pos"), bound.label("id"))
                for i, bound in enumerate(_bound("id", ids))
            )
        ).cte("candidates")
        lock = (
            select(*JOB_COLUMNS, jobs.c.state, self._now.label("now"))
            .select_from(listed)
            .join(jobs, jobs.c.id == listed.c.id)
            .where(due(self._now, self._walk))
            .order_by(listed.c.pos)
            .limit(bindparam("limit"))
            .with_for_update(skip_locked=True)
        )
        for dialect in ("mariadb", "mysql"):
            lock = lock.with_hint(jobs, "FORCE INDEX (PRIMARY)", dialect_name=dialect)
            lock = lock.prefix_with("STRAIGHT_JOIN", dialect=dialect)
        return lock

    def _write_dead(self, ids: int) -> ClauseElement:
        return (
            update(jobs)
            .where(jobs.c.id.in_(_bound("id", ids)))
            .values(**dead_values(), ready_at=jobs.c.visible_at)
        )

    def _write_claimed(self, ids: int) -> ClauseElement:
        return (
            update(jobs)
            .where(jobs.c.id.in_(_bound("id", ids)))
            .ordered_values(
                (jobs.c.ready_at, jobs.c.visible_at),
                (jobs.c.state, RUNNING),
                (jobs.c.attempts, jobs.c.attempts + 1),
                (jobs.c.visible_at, bindparam("lease_end", type_=Double)),
                (jobs.c.lease_token, bindparam("token")),
                (jobs.c.worker, bindparam("claimant")),
                (jobs.c.started_at, null()),  # held, not yet started (W9)
            )
        )


def claim(
    steps: ClaimSteps, params: dict[str, Any], limit: int, contention: Contention
) -> Program[list[Job]]:
    handed: list[Job] = []
    passed: list[int] = []  # read as candidates, then found taken or no longer due
    token = params["token"]
    while len(handed) < limit:
        need = limit - len(handed)
        margin = contention.margin()
        wanted = need + margin
        size = bucket(len(passed)) if passed else 0
        read = {**params, "wanted": wanted, **(listed("passed", passed, size) if size else {})}
        _, found, _ = yield RunCompiled(steps.candidates(size), read)
        ids = [row[0] for row in found]
        if not ids:
            break
        size = bucket(len(ids))
        locking = {**params, **listed_as_rows("id", ids, size), "limit": need}
        _, rows, _ = yield RunCompiled(steps.lock(size), locking)
        taken = [row[ID] for row in rows]
        # The lock walks the candidates in their order and stops at `need`: those before
        # its last were locked elsewhere or are no longer due; those after, not yet seen.
        seen = ids if len(taken) < need else ids[: ids.index(taken[-1]) + 1]
        passed.extend(i for i in seen if i not in taken)
        passed.extend(taken)
        # R08: a lease that ended on the last attempt is written dead, never handed out;
        # the loop reads on for the room it took.
        lost = sorted(
            row[ID]
            for row in rows
            if row[STATE] == "running" and row[ATTEMPTS] >= row[MAX_ATTEMPTS]
        )
        if lost:
            size = bucket(len(lost))
            yield RunCompiled(steps.write_dead(size), listed("id", lost, size))
        claimed = [row for row in rows if row[ID] not in lost]
        if claimed:
            lease_end = float(rows[0][NOW]) + params["lease_seconds"]
            ids = [row[ID] for row in claimed]
            size = bucket(len(ids))
            writing = {**params, **listed("id", ids, size), "lease_end": lease_end}
            yield RunCompiled(steps.write_claimed(size), writing)
            handed.extend(claimed_jobs([_as_claimed(row, lease_end) for row in claimed], token))
        if len(found) < wanted and len(taken) < need:
            break  # every due row was seen: there is nothing more to take
        if len(handed) < limit:  # to read again: other claims took or held what it read
            contention.read_again(margin)
    return handed


def _as_claimed(row: Any, lease_end: float) -> tuple[Any, ...]:
    """A locked row as `statements.CLAIM_RETURNS` would give it after the claim's write:
    one attempt more, the lease's end, and `ready_at` the `visible_at` it had."""
    values = list(row[: len(JOB_COLUMNS)])
    ready_at = values[VISIBLE_AT]
    values[ATTEMPTS] += 1
    values[VISIBLE_AT] = lease_end
    return (*values, "running", ready_at)
