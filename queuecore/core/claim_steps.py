"""The claim in steps, for a database whose locking read locks every row its scan walks
past, not only the rows it returns (InnoDB: `Backend.locks_rows_it_walks_past`).

There a claim of one locking statement would hold, until it commits, the running jobs
ahead of the ready ones in the index, and their holders' heartbeats and completions
would wait for it (ADR 0012, measured). So, in one transaction: the candidates are read
in claim order without locks; those still due are locked by id, skipping any another
claim holds, and read whole with the clock, since such a database has no UPDATE …
RETURNING; then written (R06, or dead by R08) from what was read. Two claimers that read
the same candidates do not both come back empty-handed: the one that found them locked
reads on past them, so a claim is empty only when nothing it may take is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Double, Select, Update, bindparam, null, select, update
from sqlalchemy.sql.elements import BindParameter

from queuecore.core.plans import Program, Run
from queuecore.core.shaping import ATTEMPTS, ID, MAX_ATTEMPTS, STATE, VISIBLE_AT, claimed_job
from queuecore.sql.schema import RUNNING, jobs
from queuecore.sql.statements import JOB_COLUMNS, Now, Walk, dead_values, due, filtered

if TYPE_CHECKING:
    from queuecore.job import Job

#: Candidates read beyond the claim's size, for the rows concurrent claims lock first.
MARGIN = 8

_IDS: BindParameter[list[int]] = bindparam("ids", expanding=True)
#: Where the locked rows hold the clock's reading (after `state`).
NOW = len(JOB_COLUMNS) + 1


class ClaimSteps(NamedTuple):
    candidates: Select[Any]
    lock: Select[Any]
    write_dead: Update
    write_claimed: Update


def build(now: Now, walk: Walk, queue_count: int | None, kind_count: int | None) -> ClaimSteps:
    """The statements of one claim shape (queues and kinds filters as `picked`'s)."""
    candidates = filtered(
        select(jobs.c.id).where(
            due(now, walk), jobs.c.id.not_in(bindparam("passed", expanding=True))
        ),
        queue_count,
        kind_count,
    )
    # The locked rows come back whole, with the clock's reading: what the claim writes
    # is known from them, so nothing is read back (there is no UPDATE … RETURNING).
    lock = (
        select(*JOB_COLUMNS, jobs.c.state, now.label("now"))
        .where(jobs.c.id.in_(_IDS), due(now, walk))
        .order_by(*walk.order)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    # By id, never by a walk of the claim-order index: the optimizer took that walk for
    # the ORDER BY ... LIMIT once the table had churned, and a locking read locks what
    # it walks past (403 rows examined a lock with 4 workers, against 13 with one).
    for dialect in ("mariadb", "mysql"):
        lock = lock.with_hint(jobs, "FORCE INDEX (PRIMARY)", dialect_name=dialect)
    # Each write reads only columns it leaves alone, or sets them after reading them
    # (`ordered_values`): MariaDB applies SET assignments one after another, not at once.
    write_dead = (
        update(jobs).where(jobs.c.id.in_(_IDS)).values(**dead_values(), ready_at=jobs.c.visible_at)
    )
    write_claimed = (
        update(jobs)
        .where(jobs.c.id.in_(_IDS))
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
    return ClaimSteps(
        candidates.order_by(*walk.order).limit(bindparam("wanted")), lock, write_dead, write_claimed
    )


def claim(steps: ClaimSteps, params: dict[str, Any], limit: int) -> Program[list[Job]]:
    handed: list[Job] = []
    passed: list[int] = []  # read as candidates, then found taken or no longer due
    token = params["token"]
    while len(handed) < limit:
        need = limit - len(handed)
        wanted = need + MARGIN
        read = {**params, "wanted": wanted, "passed": passed}
        ids = list((yield Run(steps.candidates, read)).scalars())
        if not ids:
            break
        rows = (yield Run(steps.lock, {**params, "ids": ids, "limit": need})).all()
        taken = [row[ID] for row in rows]
        # The lock walks the candidates in their order and stops at `need`: those before
        # its last were locked elsewhere or are no longer due; those after, not yet seen.
        seen = ids if len(taken) < need else ids[: ids.index(taken[-1]) + 1]
        passed.extend(i for i in seen if i not in taken)
        passed.extend(taken)
        # R08: a lease that ended on the last attempt is written dead, never handed out;
        # the loop reads on for the room it took.
        lost = {
            row[ID]
            for row in rows
            if row[STATE] == "running" and row[ATTEMPTS] >= row[MAX_ATTEMPTS]
        }
        if lost:
            yield Run(steps.write_dead, {"ids": sorted(lost)})
        claimed = [row for row in rows if row[ID] not in lost]
        if claimed:
            lease_end = float(rows[0][NOW]) + params["lease_seconds"]
            writing = {**params, "ids": [row[ID] for row in claimed], "lease_end": lease_end}
            yield Run(steps.write_claimed, writing)
            handed.extend(claimed_job(_as_claimed(row, lease_end), token) for row in claimed)
        if len(ids) < wanted and len(taken) < need:
            break  # every due row was seen: there is nothing more to take
    return handed


def _as_claimed(row: Any, lease_end: float) -> tuple[Any, ...]:
    """A locked row as `statements.CLAIM_RETURNS` would give it after the claim's write:
    one attempt more, the lease's end, and `ready_at` the `visible_at` it had."""
    values = list(row[: len(JOB_COLUMNS)])
    ready_at = values[VISIBLE_AT]
    values[ATTEMPTS] += 1
    values[VISIBLE_AT] = lease_end
    return (*values, "running", ready_at)
