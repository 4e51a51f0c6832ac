"""Every statement the queue runs, written once for both dialects.

Each builder takes `now`, the SQL expression for the current time: a bound parameter
when the clock is the client's (or a fake one), the server's clock on PostgreSQL (R20).
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Delete,
    Double,
    Select,
    Text,
    Update,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from queuecore.schema import DEAD, DONE, IS_DEAD, IS_RUNNING, LIVE, QUEUED, RUNNING, jobs

LEASE_EXPIRED_ON_LAST_ATTEMPT = "lease expired on the last attempt"

Now = ColumnElement[float]

JOB_COLUMNS = (
    jobs.c.id,
    jobs.c.kind,
    jobs.c.payload,
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.visible_at,
)


def ready(now: Now) -> ColumnElement[bool]:
    """May this job be claimed now? Out-of-attempts leases are excluded: R08 retires them."""
    return LIVE & (jobs.c.visible_at <= now) & (jobs.c.attempts < jobs.c.max_attempts)


def retire(now: Now) -> Update:
    """R08: a lease that ran out on the last attempt makes its job dead, never claimable."""
    expired = (
        select(jobs.c.id)
        .where(IS_RUNNING, jobs.c.visible_at <= now, jobs.c.attempts >= jobs.c.max_attempts)
        .with_for_update(skip_locked=True)
    )
    return (
        update(jobs)
        .where(jobs.c.id.in_(expired.scalar_subquery()))
        .values(
            state=DEAD,
            finished_at=now,
            lease_token=None,
            last_error=LEASE_EXPIRED_ON_LAST_ATTEMPT,
        )
    )


#: The claim's size as the caller gives it.
LIMIT = bindparam("limit")
#: A one-job claim's size, written into its SQL. Bound as `LIMIT $n`, PostgreSQL's plan
#: cache prices the generic plan at a tenth of the ready rows, never picks it, and plans
#: the whole claim afresh on every call: with several workers that planning, not the
#: claim itself, used up the CPU.
ONE = literal_column("1")


def picked(
    now: Now, queue_count: int | None, limit: ColumnElement[int], kind_count: int | None = None
) -> Select:
    """R05: the ready jobs in claim order, at most `limit`, locked against other claims
    (`FOR UPDATE SKIP LOCKED`; SQLite drops it: its write lock already serialises claims).

    `queue_count` names the queues filter's size (binds `queue_0` …), and `kind_count`
    the kinds filter's (R23, binds `kind_0` …), so each shape is one fixed SQL string
    that can be compiled once and prepared by the server. The kinds filter is checked
    on the rows the live-rows index yields: no index of its own is needed (R19)."""
    stmt = select(jobs.c.id, jobs.c.visible_at).where(ready(now))
    if queue_count is not None:
        stmt = stmt.where(jobs.c.queue.in_([bindparam(f"queue_{i}") for i in range(queue_count)]))
    if kind_count is not None:
        stmt = stmt.where(jobs.c.kind.in_([bindparam(f"kind_{i}") for i in range(kind_count)]))
    return (
        stmt.order_by(jobs.c.priority, jobs.c.visible_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


def _claimed(now: Now) -> dict[str, object]:
    """R06: what a claim writes."""
    return {
        "state": RUNNING,
        "attempts": jobs.c.attempts + 1,
        "visible_at": now + bindparam("lease_seconds", type_=Double),
        "lease_token": bindparam("token"),
        "worker": bindparam("claimant"),
    }


def claim_one(now: Now, queue_count: int | None, kind_count: int | None = None) -> Update:
    """A one-job claim as `id = (SELECT … LIMIT 1)`: cheaper than a join on both dialects,
    and one row needs no order. The 1 is a literal, so PostgreSQL reuses one plan (ONE)."""
    one = picked(now, queue_count, ONE, kind_count).with_only_columns(jobs.c.id)
    return (
        update(jobs)
        .where(jobs.c.id == one.scalar_subquery())
        .values(**_claimed(now))
        .returning(*JOB_COLUMNS)
    )


def claim(
    now: Now, queue_count: int | None, *, ready_at: bool, kind_count: int | None = None
) -> Update:
    """R05/R06 in one statement for `limit` jobs. `ready_at` returns each job's
    `visible_at` from before the claim, for the caller to restore claim order; SQLite
    cannot return a column of another FROM table, so there `claim_order` runs first."""
    chosen = picked(now, queue_count, LIMIT, kind_count).subquery("picked")
    returning = [*JOB_COLUMNS, chosen.c.visible_at.label("ready_at")] if ready_at else JOB_COLUMNS
    return (
        update(jobs).where(jobs.c.id == chosen.c.id).values(**_claimed(now)).returning(*returning)
    )


def claim_order(now: Now, queue_count: int | None, kind_count: int | None = None) -> Select:
    """The ids `claim` is about to take, in claim order (SQLite, under its write lock)."""
    return picked(now, queue_count, LIMIT, kind_count).with_only_columns(jobs.c.id)


def _fenced() -> ColumnElement[bool]:
    """The fence (R09): this id, this claim's token, still running."""
    return (
        (jobs.c.id == bindparam("job_id")) & (jobs.c.lease_token == bindparam("token")) & IS_RUNNING
    )


def complete(now: Now) -> Update:
    return update(jobs).where(_fenced()).values(state=DONE, finished_at=now, lease_token=None)


def complete_batch(now: Now) -> Update:
    """PostgreSQL: many fenced completes in one statement, each row fenced by its own
    (id, token) pair, passed as two arrays; returns the pairs that passed."""
    fences = (
        func.unnest(
            bindparam("job_ids", type_=ARRAY(BigInteger)), bindparam("tokens", type_=ARRAY(Text))
        )
        .table_valued("job_id", "token")
        .render_derived(name="fences")
    )
    return (
        update(jobs)
        .where(jobs.c.id == fences.c.job_id, jobs.c.lease_token == fences.c.token, IS_RUNNING)
        .values(state=DONE, finished_at=now, lease_token=None)
        .returning(jobs.c.id, fences.c.token)
    )


def fail_retry(now: Now) -> Update:
    return (
        update(jobs)
        .where(_fenced())
        .values(
            state=QUEUED,
            visible_at=now + bindparam("delay", type_=Double),
            last_error=bindparam("error"),
            lease_token=None,
        )
    )


def fail_dead(now: Now) -> Update:
    return (
        update(jobs)
        .where(_fenced())
        .values(state=DEAD, finished_at=now, last_error=bindparam("error"), lease_token=None)
    )


def heartbeat(now: Now) -> Update:
    return (
        update(jobs)
        .where(_fenced())
        .values(visible_at=now + bindparam("lease_seconds", type_=Double))
        .returning(jobs.c.visible_at)
    )


def release(now: Now) -> Update:
    """R14: the claim's attempt is given back, so a graceful shutdown costs nothing."""
    return (
        update(jobs)
        .where(_fenced())
        .values(state=QUEUED, visible_at=now, attempts=jobs.c.attempts - 1, lease_token=None)
    )


def requeue_dead(now: Now, *, by_id: bool) -> Update:
    stmt = update(jobs).where(jobs.c.state == DEAD)
    if by_id:
        stmt = stmt.where(jobs.c.id.in_(bindparam("ids", expanding=True)))
    return stmt.values(
        state=QUEUED, attempts=0, visible_at=now, finished_at=None, lease_token=None
    ).returning(jobs.c.id)


def live_counts(now: Now) -> Select:
    """Per queue, kind and state: counts over live rows only (R16), served by the partial
    index. By kind too, so that a kind no worker serves shows up (W2)."""
    is_ready = ready(now)
    return (
        select(
            jobs.c.queue,
            jobs.c.kind,
            jobs.c.state,
            func.count(),
            func.count().filter(is_ready),
            now - func.min(jobs.c.visible_at).filter(is_ready),
        )
        .where(LIVE)
        .group_by(jobs.c.queue, jobs.c.kind, jobs.c.state)
    )


def dead_counts() -> Select:
    return select(jobs.c.queue, func.count()).where(jobs.c.state == DEAD).group_by(jobs.c.queue)


def purge_batch(now: Now, state: ColumnElement[str]) -> Delete:
    """One short transaction's worth of finished rows (R17)."""
    oldest = (
        select(jobs.c.id)
        .where(
            jobs.c.state == state, jobs.c.finished_at < now - bindparam("older_than", type_=Double)
        )
        .limit(bindparam("batch"))
    )
    return delete(jobs).where(jobs.c.id.in_(oldest.scalar_subquery()))


def get() -> Select:
    return select(jobs).where(jobs.c.id == bindparam("job_id"))


def dead_jobs(*, by_queue: bool) -> Select:
    """The dead-letter list for a person, newest first; reads dead rows only."""
    stmt = select(jobs).where(IS_DEAD)
    if by_queue:
        stmt = stmt.where(jobs.c.queue == bindparam("queue"))
    return stmt.order_by(jobs.c.finished_at.desc(), jobs.c.id.desc()).limit(bindparam("limit"))
