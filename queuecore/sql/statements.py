"""Every statement the queue runs, written once for both dialects.

Each builder takes `now`, the SQL expression for the current time: a bound parameter
when the clock is the client's (or a fake one), the server's clock on PostgreSQL (R20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Delete,
    Double,
    Insert,
    Select,
    Text,
    Update,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.sql.elements import BindParameter, ColumnClause, ColumnElement

from queuecore.sql.attempt_errors import appended_error
from queuecore.sql.schema import (
    CANCELLED,
    DEAD,
    DONE,
    IS_CANCELLED,
    IS_DEAD,
    IS_RUNNING,
    LIVE,
    QUEUED,
    RESULT_TYPE,
    RUNNING,
    jobs,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    from typing_extensions import Unpack

    #: A SELECT of any columns (SQLAlchemy 2.1 types a Select by its column types).
    AnySelect: TypeAlias = Select[Unpack[tuple[Any, ...]]]

LEASE_EXPIRED_ON_LAST_ATTEMPT = "lease expired on the last attempt"

Now = ColumnElement[float]

# A claim's columns. The payload is read as its JSON text: a `ClaimedJob` decodes it
# where it is first read (in a handler process, not in the worker's claimer), and one
# that is not JSON fails its own job rather than the claim.
JOB_COLUMNS = (
    jobs.c.id,
    jobs.c.kind,
    cast(jobs.c.payload, Text()).label("payload"),
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.visible_at,
    jobs.c.trace_context,
)


# --- R08: a lease that ends on the last attempt --------------------------------------
# Such a job is dead from the instant its lease ends. The row may still say `running`:
# the dead state is written lazily, by the claim that meets the row or by `retire`.
# Every read goes through what follows, so no caller can tell whether it was written.


def lease_lost(now: Now) -> ColumnElement[bool]:
    """The row says running, but its lease is over and no attempt is left: it is dead."""
    return IS_RUNNING & (jobs.c.visible_at <= now) & (jobs.c.attempts >= jobs.c.max_attempts)


def dead_values() -> dict[str, ColumnElement[object]]:
    """What R08's dead state is, column by column, computed from the row itself: its
    finish is the end of its lease, whenever the state is written, so written and unwritten
    look the same."""
    error = literal(LEASE_EXPIRED_ON_LAST_ATTEMPT)
    return {
        "state": DEAD,
        "finished_at": jobs.c.visible_at,
        "lease_token": null(),
        "last_error": error,
        # R32: the lost lease is the last attempt's failure, ended when the lease did.
        "errors": appended_error(jobs.c.errors, jobs.c.attempts, jobs.c.visible_at, error),
    }


#: The JSON columns a view of a job reads as text and decodes itself (`job.shown_json`):
#: a driver's decoding raised on a row whose text is not JSON, and the listing with it.
AS_TEXT = ("payload", "result")


def seen(now: Now) -> list[ColumnElement[Any]]:
    """Every column of the jobs table as a read must report it (R08); the JSON ones that
    a person reads (AS_TEXT) as their text."""
    lost = lease_lost(now)
    dead = dead_values()
    columns: list[ColumnElement[Any]] = []
    for c in jobs.c:
        if c.name in dead:
            columns.append(case((lost, dead[c.name]), else_=c).label(c.name))
        elif c.name in AS_TEXT:
            columns.append(cast(c, Text()).label(c.name))
        else:
            columns.append(c)
    return columns


def seen_state(now: Now) -> ColumnElement[str]:
    return case((lease_lost(now), DEAD), else_=jobs.c.state)


def retire(now: Now, *, subquery: bool = True) -> Update:
    """Writes R08's dead state on every row that has it unwritten, for the operations
    that change dead rows (`requeue_dead`, `purge`): reads never need it. The rows other
    transactions hold are passed over (`subquery`); where a write cannot read its own
    table in a subquery (MariaDB), it waits for them instead."""
    if not subquery:
        return update(jobs).where(lease_lost(now)).values(**dead_values())
    expired = select(jobs.c.id).where(lease_lost(now)).with_for_update(skip_locked=True)
    return update(jobs).where(jobs.c.id.in_(expired.scalar_subquery())).values(**dead_values())


def ready(now: Now) -> ColumnElement[bool]:
    """May this job be claimed now? (Claimable this instant, as `stats` counts it.)"""
    return LIVE & (jobs.c.visible_at <= now) & (jobs.c.attempts < jobs.c.max_attempts)


class Walk(NamedTuple):
    """How a claim walks the live rows in claim order (R05), as the live-rows index has
    them: `live` selects them, `order` is the index's order."""

    live: ColumnElement[bool]
    order: tuple[ColumnElement[Any], ...]


#: Where partial indexes hold the live rows only (SQLite, PostgreSQL).
LIVE_WALK = Walk(LIVE, (jobs.c.priority, jobs.c.visible_at, jobs.c.id))


def due(now: Now, walk: Walk = LIVE_WALK) -> ColumnElement[bool]:
    """What a claim walks: every live row whose time has come, leases lost on the last
    attempt included, so that the claim itself writes them dead (`_claimed`)."""
    return walk.live & (jobs.c.visible_at <= now)


#: The claim's size as the caller gives it.
LIMIT: BindParameter[int] = bindparam("limit")
#: A one-job claim's size, written into its SQL. Bound as `LIMIT $n`, PostgreSQL's plan
#: cache prices the generic plan at a tenth of the ready rows, never picks it, and plans
#: the whole claim afresh on every call: with several workers that planning, not the
#: claim itself, used up the CPU.
ONE: ColumnClause[int] = literal_column("1")


def picked(
    now: Now,
    queue_count: int | None,
    limit: ColumnElement[int],
    kind_count: int | None = None,
    walk: Walk = LIVE_WALK,
) -> AnySelect:
    """R05: the ready jobs in claim order, at most `limit`, locked against other claims
    (`FOR UPDATE SKIP LOCKED`; SQLite drops it: its write lock already serialises claims).

    `queue_count` names the queues filter's size (binds `queue_0` …), and `kind_count`
    the kinds filter's (R23, binds `kind_0` …), so each shape is one fixed SQL string
    that can be compiled once and prepared by the server. The kinds filter is checked
    on the rows the live-rows index yields: no index of its own is needed (R19)."""
    stmt = filtered(
        select(jobs.c.id, jobs.c.visible_at).where(due(now, walk)), queue_count, kind_count
    )
    return stmt.order_by(*walk.order).limit(limit).with_for_update(skip_locked=True)


def filtered(stmt: AnySelect, queue_count: int | None, kind_count: int | None) -> AnySelect:
    """A claim's queues and kinds filters (R23), as bound `queue_0`, … and `kind_0`, …"""
    if queue_count is not None:
        stmt = stmt.where(jobs.c.queue.in_([bindparam(f"queue_{i}") for i in range(queue_count)]))
    if kind_count is not None:
        stmt = stmt.where(jobs.c.kind.in_([bindparam(f"kind_{i}") for i in range(kind_count)]))
    return stmt


def _claimed(now: Now) -> dict[str, object]:
    """R06: what a claim writes; and R08: a row it meets whose lease ended on the last
    attempt (the pick has proven the lease is over) is written dead instead, returned
    with state `dead` for the caller to drop, never handed out."""
    claimed: dict[str, ColumnElement[Any]] = {
        "state": RUNNING,
        "attempts": jobs.c.attempts + 1,
        "visible_at": now + bindparam("lease_seconds", type_=Double),
        "lease_token": bindparam("token"),
        "worker": bindparam("claimant"),
        "started_at": null(),  # held, not yet started (W9)
    }
    lost = IS_RUNNING & (jobs.c.attempts >= jobs.c.max_attempts)
    dead = dead_values()
    written: dict[str, object] = {
        name: case((lost, dead.get(name, jobs.c[name])), else_=claimed.get(name, jobs.c[name]))
        for name in {**claimed, **dead}
    }
    # When the row became ready: SET reads the row as it was, so this is the `visible_at`
    # the pick saw (enqueued, delay or backoff over, or a lease's end). Returned for the
    # worker's time in queue (issue 14) and the claim order; written on dead rows too,
    # so every returned row has one to sort by.
    written["ready_at"] = jobs.c.visible_at
    return written


#: What a claim returns: the job, then its state (`dead`: written dead, not handed out)
#: and `ready_at`, the `visible_at` from before the claim (`_claimed`).
CLAIM_RETURNS = (*JOB_COLUMNS, jobs.c.state, jobs.c.ready_at)


def claim_one(now: Now, queue_count: int | None, kind_count: int | None = None) -> Update:
    """A one-job claim as `id = (SELECT … LIMIT 1)`: cheaper than a join on both dialects,
    and one row needs no order. The 1 is a literal, so PostgreSQL reuses one plan (ONE)."""
    one = picked(now, queue_count, ONE, kind_count).with_only_columns(jobs.c.id)
    return (
        update(jobs)
        .where(jobs.c.id == one.scalar_subquery())
        .values(**_claimed(now))
        .returning(*CLAIM_RETURNS)
    )


def claim(now: Now, queue_count: int | None, kind_count: int | None = None) -> Update:
    """R05/R06 in one statement for `limit` jobs. RETURNING comes in no order: the
    returned `ready_at` (the claim-order `visible_at`) lets the caller restore it."""
    chosen = picked(now, queue_count, LIMIT, kind_count).subquery("picked")
    return (
        update(jobs)
        .where(jobs.c.id == chosen.c.id)
        .values(**_claimed(now))
        .returning(*CLAIM_RETURNS)
    )


def claim_order(now: Now, queue_count: int | None, kind_count: int | None = None) -> AnySelect:
    """The ids `claim` is about to take, in claim order (SQLite, under its write lock)."""
    return picked(now, queue_count, LIMIT, kind_count).with_only_columns(jobs.c.id)


def _held(now: Now) -> ColumnElement[bool]:
    """Still running, and not dead by R08 (its lease ended on the last attempt)."""
    return IS_RUNNING & ((jobs.c.visible_at > now) | (jobs.c.attempts < jobs.c.max_attempts))


def _fenced(now: Now) -> ColumnElement[bool]:
    """The fence (R09): this id, this claim's token, still held."""
    return (
        (jobs.c.id == bindparam("job_id")) & (jobs.c.lease_token == bindparam("token")) & _held(now)
    )


def held_of(now: Now, count: int) -> AnySelect:
    """W9: which of `count` jobs (`job_0` …) are still held, and under which token: the
    read of the fence (R09) a worker makes before it hands jobs claimed ahead to their
    handlers, and while they run, to learn of a cancel. It writes nothing: on SQLite it
    takes no write lock, on the others no row lock. The caller compares the tokens."""
    ids = [bindparam(f"job_{i}", type_=BigInteger) for i in range(count)]
    return select(jobs.c.id, jobs.c.lease_token).where(jobs.c.id.in_(ids), _held(now))


def started_of(now: Now, count: int) -> Update:
    """W9: `count` jobs (`job_0` …) a worker's slots have started, still held under one
    of the claims' tokens (`token_0` …), get `started_at` (once: the first start under
    the claim). A job whose token is one of those is under one of that worker's claims.
    Sized, not expanding, so that it runs on the hot path's own connection."""
    ids = [bindparam(f"job_{i}", type_=BigInteger) for i in range(count)]
    tokens = [bindparam(f"token_{i}", type_=Text) for i in range(count)]
    return (
        update(jobs)
        .where(
            jobs.c.id.in_(ids),
            jobs.c.lease_token.in_(tokens),
            jobs.c.started_at.is_(None),
            _held(now),
        )
        .values(started_at=now)
    )


def complete(now: Now) -> Update:
    return update(jobs).where(_fenced(now)).values(state=DONE, finished_at=now, lease_token=None)


def complete_with_result(now: Now) -> Update:
    """R24: the result is written by the statement that passes the fence, so it exists
    exactly when the job is done."""
    return complete(now).values(result=bindparam("result", type_=RESULT_TYPE))


def cancel(now: Now) -> Update:
    """R25: a live job becomes cancelled; clearing the token fences its holder off. A
    lease that ran out on the last attempt is dead already (R08), not cancellable."""
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("job_id"), LIVE, ~lease_lost(now))
        .values(state=CANCELLED, finished_at=now, lease_token=None)
    )


def mark_awaited() -> Update:
    """A `wait()` asks to hear of the job's end (PostgreSQL's trigger NOTIFYs then)."""
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("job_id"), LIVE, jobs.c.awaited.is_not(True))
        .values(awaited=True)
    )


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
        .where(jobs.c.id == fences.c.job_id, jobs.c.lease_token == fences.c.token, _held(now))
        .values(state=DONE, finished_at=now, lease_token=None)
        .returning(jobs.c.id, fences.c.token)
    )


def complete_fences(now: Now, count: int) -> Update:
    """SQLite: many fenced completes in one statement, each row fenced by its own pair
    (`job_0`, `token_0`) … of `count`, a list of row values the primary key is searched
    for; returns the ids that passed. Sized, not expanding: it runs on the hot path."""
    fences = [
        tuple_(bindparam(f"job_{i}", type_=BigInteger), bindparam(f"token_{i}", type_=Text))
        for i in range(count)
    ]
    return (
        update(jobs)
        .where(tuple_(jobs.c.id, jobs.c.lease_token).in_(fences), _held(now))
        .values(state=DONE, finished_at=now, lease_token=None)
        .returning(jobs.c.id)
    )


def complete_pick(now: Now) -> AnySelect:
    """Where an UPDATE returns nothing (MariaDB): of the jobs `job_ids`, those still held
    and their tokens, locked, so that `complete_picked` then completes by id the very
    rows whose fences the caller found passed, in the same transaction."""
    ids = bindparam("job_ids", expanding=True, type_=BigInteger)
    return (
        select(jobs.c.id, jobs.c.lease_token)
        .where(jobs.c.id.in_(ids), _held(now))
        .with_for_update()
    )


def complete_picked(now: Now) -> Update:
    """The jobs `picked` done: each one's fence was read, under its row lock, by
    `complete_pick` in this transaction."""
    picked = bindparam("picked", expanding=True, type_=BigInteger)
    return (
        update(jobs)
        .where(jobs.c.id.in_(picked))
        .values(state=DONE, finished_at=now, lease_token=None)
    )


def _failed(now: Now) -> ColumnElement[Any]:
    """R32: the history with this attempt's failure, in the statement that records it."""
    return appended_error(jobs.c.errors, jobs.c.attempts, now, bindparam("error"))


def fail_retry(now: Now) -> Update:
    return (
        update(jobs)
        .where(_fenced(now))
        .values(
            state=QUEUED,
            visible_at=now + bindparam("delay", type_=Double),
            last_error=bindparam("error"),
            errors=_failed(now),
            lease_token=None,
        )
    )


def fail_dead(now: Now) -> Update:
    return (
        update(jobs)
        .where(_fenced(now))
        .values(
            state=DEAD,
            finished_at=now,
            last_error=bindparam("error"),
            errors=_failed(now),
            lease_token=None,
        )
    )


def heartbeat(now: Now, *, returning: bool = True) -> Update:
    """The lease's new end comes back with it, or from `lease_end` where an UPDATE
    cannot return rows (MariaDB)."""
    stmt = (
        update(jobs)
        .where(_fenced(now))
        .values(visible_at=now + bindparam("lease_seconds", type_=Double))
    )
    return stmt.returning(jobs.c.visible_at) if returning else stmt


def lease_end() -> AnySelect:
    """The lease's end as the heartbeat just wrote it, read in the same transaction."""
    return select(jobs.c.visible_at).where(
        jobs.c.id == bindparam("job_id"), jobs.c.lease_token == bindparam("token")
    )


def release(now: Now) -> Update:
    """R14: the claim's attempt is given back, so a graceful shutdown costs nothing."""
    return (
        update(jobs)
        .where(_fenced(now))
        .values(state=QUEUED, visible_at=now, attempts=jobs.c.attempts - 1, lease_token=None)
    )


def requeue_dead(now: Now, *, by_id: bool, returning: bool = True) -> Update:
    """Where an UPDATE cannot return rows (MariaDB) the ids are `dead_to_requeue`'s, read
    first and passed as `picked`."""
    stmt = update(jobs).where(jobs.c.state == DEAD)
    if by_id:
        stmt = stmt.where(jobs.c.id.in_(bindparam("ids", expanding=True)))
    if not returning:
        stmt = stmt.where(jobs.c.id.in_(bindparam("picked", expanding=True)))
    stmt = stmt.values(state=QUEUED, attempts=0, visible_at=now, finished_at=None, lease_token=None)
    return stmt.returning(jobs.c.id) if returning else stmt


def dead_to_requeue(*, by_id: bool) -> AnySelect:
    """The dead rows `requeue_dead` is to take, locked until it has."""
    stmt = select(jobs.c.id).where(jobs.c.state == DEAD)
    if by_id:
        stmt = stmt.where(jobs.c.id.in_(bindparam("ids", expanding=True)))
    return stmt.with_for_update()


def live_counts(now: Now, walk: Walk = LIVE_WALK) -> AnySelect:
    """Per queue, kind and state: counts over live rows only (R16), served by the index
    the claim walks. By kind too, so that a kind no worker serves shows up (W2)."""
    is_ready = ready(now)
    state = seen_state(now)  # a lease lost on the last attempt counts as dead (R08)
    return (
        select(
            jobs.c.queue,
            jobs.c.kind,
            state.label("state"),
            func.count().label("jobs"),
            # CASE rather than FILTER, which MariaDB lacks: the same on every database.
            func.count(case((is_ready, 1))).label("ready"),
            (now - func.min(case((is_ready, jobs.c.visible_at)))).label("oldest_ready_age"),
            # Of the running ones, those whose handler has started (W9): the rest are
            # held ahead of a slot. A queued row's `started_at` is its last attempt's.
            func.count(jobs.c.started_at).label("started"),
        )
        .where(walk.live)
        .group_by(jobs.c.queue, jobs.c.kind, state)
    )


def dead_counts() -> AnySelect:
    return select(jobs.c.queue, func.count()).where(jobs.c.state == DEAD).group_by(jobs.c.queue)


def cancelled_counts() -> AnySelect:
    """Served by the partial index over cancelled rows: done rows are never read."""
    return select(jobs.c.queue, func.count()).where(IS_CANCELLED).group_by(jobs.c.queue)


def purge_batch(now: Now, state: ColumnElement[str], *, subquery: bool = True) -> Delete:
    """One short transaction's worth of finished rows (R17). Where a write cannot read
    its own table in a subquery (MariaDB), the batch is read as a derived table."""
    oldest = (
        select(jobs.c.id)
        .where(
            jobs.c.state == state, jobs.c.finished_at < now - bindparam("older_than", type_=Double)
        )
        .limit(bindparam("batch"))
    )
    if not subquery:
        batch = oldest.subquery("oldest")
        return delete(jobs).where(jobs.c.id.in_(select(batch.c.id)))
    return delete(jobs).where(jobs.c.id.in_(oldest.scalar_subquery()))


#: What `enqueue` writes from its caller's values (the times come from the queue's clock).
ENQUEUED = (
    "kind",
    "queue",
    "payload",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "trace_context",
)


def enqueue_one(times: dict[str, ColumnElement[float]]) -> Insert:
    """One job without a dedupe key (nothing can conflict), as one fixed statement that
    the hot path compiles once: every value a named parameter."""
    values = {name: bindparam(name, type_=jobs.c[name].type) for name in ENQUEUED}
    return insert(jobs).values(**values, **times).returning(jobs.c.id)


def enqueue_batch(now: Now, payloads: ColumnElement[object]) -> Insert:
    """Many jobs of one kind in one statement: `payloads` is a set-returning expression of
    (value, ordinality), inserted in that order, so the ids grow in the payloads' order."""
    elements = payloads.table_valued("value", with_ordinality="ordinality").render_derived(
        name="given"
    )
    rows = select(
        bindparam("kind", type_=jobs.c.kind.type),
        bindparam("queue", type_=jobs.c.queue.type),
        elements.c.value,
        bindparam("priority", type_=jobs.c.priority.type),
        QUEUED,
        literal_column("0"),
        bindparam("max_attempts", type_=jobs.c.max_attempts.type),
        bindparam("trace_context", type_=jobs.c.trace_context.type),
        now,
        now,
    ).order_by(elements.c.ordinality)
    columns = [*ENQUEUED, "visible_at", "created_at"]
    return insert(jobs).from_select(columns, rows).returning(jobs.c.id)


def get(now: Now) -> AnySelect:
    return select(*seen(now)).where(jobs.c.id == bindparam("job_id"))


def dead_jobs(now: Now, *, by_queue: bool) -> AnySelect:
    """The dead-letter list for a person, newest first: the dead rows, and the running
    ones dead by R08 (each part read through its own partial index)."""
    parts = [select(*seen(now)).where(IS_DEAD), select(*seen(now)).where(lease_lost(now))]
    if by_queue:
        parts = [part.where(jobs.c.queue == bindparam("queue")) for part in parts]
    listed = union_all(*parts).subquery("dead")
    return (
        select(listed)
        .order_by(listed.c.finished_at.desc(), listed.c.id.desc())
        .limit(bindparam("limit"))
    )


#: The states `list_jobs` may be asked for, as SQL literals (partial indexes match them).
STATE_LITERALS = {
    "queued": QUEUED,
    "running": RUNNING,
    "done": DONE,
    "dead": DEAD,
    "cancelled": CANCELLED,
}


def list_jobs(
    now: Now, states: tuple[str, ...] | None, *, by_kind: bool, by_queue: bool, walk: Walk
) -> AnySelect:
    """R31: jobs in id order after the cursor `after_id`, at most `limit`, filtered by
    kind (`kinds`) and queue (`queues`), both expanding binds. With `states`, each state's
    rows are read through their own index, a part each, in id order and cut at `limit`:
    the live rows through the claim's (so asking for live states reads no finished row,
    R19), R08's lost leases through the leases index, each finished state through its
    own. Without, every row is read in id order (the primary key)."""

    def narrowed(stmt: AnySelect) -> AnySelect:
        if by_kind:
            stmt = stmt.where(jobs.c.kind.in_(bindparam("kinds", expanding=True)))
        if by_queue:
            stmt = stmt.where(jobs.c.queue.in_(bindparam("queues", expanding=True)))
        stmt = stmt.where(jobs.c.id > bindparam("after_id"))
        return stmt.order_by(jobs.c.id).limit(bindparam("limit"))

    if states is None:
        return narrowed(select(*seen(now)))
    parts = []
    live = [STATE_LITERALS[s] for s in states if s in ("queued", "running")]
    if live:  # a lease lost on the last attempt reads as dead (R08), not as running
        parts.append(narrowed(select(*seen(now)).where(walk.live, seen_state(now).in_(live))))
    if "dead" in states:
        parts.append(narrowed(select(*seen(now)).where(lease_lost(now))))
    for state in ("done", "dead", "cancelled"):
        if state in states:
            parts.append(narrowed(select(*seen(now)).where(jobs.c.state == STATE_LITERALS[state])))
    if len(parts) == 1:
        return parts[0]
    listed = union_all(*(select(part.subquery()) for part in parts)).subquery("listed")
    return select(listed).order_by(listed.c.id).limit(bindparam("limit"))
