"""The claim in steps, for a database whose locking read locks every row its scan walks
past, not only the rows it returns (InnoDB: `Backend.locks_rows_it_walks_past`).

There a claim of one locking statement would hold, until it commits, the running jobs
ahead of the ready ones in the index, and their holders' heartbeats and completions
would wait for it (ADR 0012, measured). So, in one transaction: the candidates are read
in claim order without locks; those still due are locked by id, skipping any another
claim holds; the locked rows are written (R06, or dead by R08); and read back, since
such a database has no UPDATE … RETURNING either. Two claimers that read the same
candidates do not both come back empty-handed: the one that found them locked reads on
past them, so a claim is empty only when nothing it may take is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Double, Select, Update, bindparam, select, update
from sqlalchemy.sql.elements import BindParameter

from queuecore.plans import Program, Run
from queuecore.schema import IS_RUNNING, LIVE, RUNNING, jobs
from queuecore.shaping import ID, STATE, claimed_job
from queuecore.statements import CLAIM_RETURNS, Now, Walk, dead_values, due, filtered

if TYPE_CHECKING:
    from queuecore.job import Job
    from queuecore.operations import Operations

#: Candidates read beyond the claim's size, for the rows concurrent claims lock first.
MARGIN = 8

_IDS: BindParameter[list[int]] = bindparam("ids", expanding=True)
#: The lease ended on the last attempt (the pick has proven the lease is over): R08.
_LOST = IS_RUNNING & (jobs.c.attempts >= jobs.c.max_attempts)


class ClaimSteps(NamedTuple):
    candidates: Select[Any]
    lock: Select[Any]
    write_dead: Update
    write_claimed: Update
    claimed: Select[Any]


def build(now: Now, walk: Walk, queue_count: int | None, kind_count: int | None) -> ClaimSteps:
    """The statements of one claim shape (queues and kinds filters as `picked`'s)."""
    candidates = filtered(
        select(jobs.c.id).where(
            due(now, walk), jobs.c.id.not_in(bindparam("passed", expanding=True))
        ),
        queue_count,
        kind_count,
    )
    lock = (
        select(jobs.c.id)
        .where(jobs.c.id.in_(_IDS), due(now, walk))
        .order_by(*walk.order)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    # Each write reads only columns it leaves alone, or sets them after reading them
    # (`ordered_values`): MariaDB applies SET assignments one after another, not at once.
    write_dead = (
        update(jobs)
        .where(jobs.c.id.in_(_IDS), _LOST)
        .values(**dead_values(), ready_at=jobs.c.visible_at)
    )
    write_claimed = (
        update(jobs)
        .where(jobs.c.id.in_(_IDS), LIVE, ~_LOST)  # LIVE: not just written dead
        .ordered_values(
            (jobs.c.ready_at, jobs.c.visible_at),
            (jobs.c.state, RUNNING),
            (jobs.c.attempts, jobs.c.attempts + 1),
            (jobs.c.visible_at, now + bindparam("lease_seconds", type_=Double)),
            (jobs.c.lease_token, bindparam("token")),
            (jobs.c.worker, bindparam("claimant")),
        )
    )
    claimed = select(*CLAIM_RETURNS).where(jobs.c.id.in_(_IDS))
    return ClaimSteps(
        candidates.order_by(*walk.order).limit(bindparam("wanted")),
        lock,
        write_dead,
        write_claimed,
        claimed,
    )


def claim(
    ops: Operations, steps: ClaimSteps, params: dict[str, Any], limit: int
) -> Program[list[Job]]:
    handed: list[Any] = []
    passed: list[int] = []  # read as candidates, then found taken or no longer due
    while len(handed) < limit:
        need = limit - len(handed)
        wanted = need + MARGIN
        read = {**params, "wanted": wanted, "passed": passed}
        ids = list((yield Run(steps.candidates, read)).scalars())
        if not ids:
            break
        taken = list((yield Run(steps.lock, {**params, "ids": ids, "limit": need})).scalars())
        # The lock walks the candidates in their order and stops at `need`: those before
        # its last were locked elsewhere or are no longer due; those after, not yet seen.
        seen = ids if len(taken) < need else ids[: ids.index(taken[-1]) + 1]
        passed.extend(i for i in seen if i not in taken)
        if taken:
            yield Run(steps.write_dead, {"ids": taken})
            yield Run(steps.write_claimed, {**params, "ids": taken})
            rank = {job_id: i for i, job_id in enumerate(taken)}
            rows = sorted(
                (yield Run(steps.claimed, {"ids": taken})).all(), key=lambda r: rank[r[ID]]
            )
            # Rows written dead (R08) are dropped; the loop reads on for the room they took.
            handed.extend(row for row in rows if row[STATE] == "running")
            passed.extend(taken)
        if len(ids) < wanted and len(taken) < need:
            break  # every due row was seen: there is nothing more to take
    return [claimed_job(row, params["token"]) for row in handed]
