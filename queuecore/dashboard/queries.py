"""What the dashboard reads, as statements over the partial indexes only.

A dashboard left open on a table with millions of finished rows must cost the queue
nothing: every list reads one partial index (live, done or dead rows), never the whole
table, and keyset pagination (`WHERE key < last key seen`) replaces OFFSET, which would
walk every skipped row. Lookups by id or dedupe key go through the primary key and the
unique index. tests/dashboard/test_plans.py asserts these plans on both dialects.

Time is a bound value read from the queue's own clock (`Queue.now()`, R20), so the
dashboard and the workers agree on what "ready" and "the last hour" mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Double, Integer, Select, bindparam, cast, func, select, tuple_
from sqlalchemy.sql.elements import ColumnElement

from queuecore.schema import IS_CANCELLED, IS_DEAD, IS_DONE, LIVE, QUEUED, RUNNING, jobs

NOW = bindparam("now", type_=Double)
#: The job list's tabs, each read through its own partial index.
LISTS = ("live", "queued", "running", "done", "dead", "cancelled")
#: The finished tabs and the partial index each reads.
FINISHED_STATES = {"done": IS_DONE, "dead": IS_DEAD, "cancelled": IS_CANCELLED}
LIST_COLUMNS = (
    jobs.c.id,
    jobs.c.kind,
    jobs.c.queue,
    jobs.c.state,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.visible_at,
    jobs.c.created_at,
    jobs.c.finished_at,
    jobs.c.dedupe_key,
    jobs.c.last_error,
)
BUCKET_SECONDS = 60
WINDOW_SECONDS = 3600


@dataclass(frozen=True)
class ListFilter:
    """A job list's tab and filters; `after` is the keyset cursor of the page before."""

    state: str = "live"
    queue: str | None = None
    kind: str | None = None
    after: tuple[float, int] | None = None

    def __post_init__(self) -> None:
        if self.state not in LISTS:
            raise ValueError(f"state must be one of {', '.join(LISTS)}, got {self.state!r}")


@dataclass(frozen=True)
class JobPage:
    rows: list[Any]
    #: The cursor of the next page (its `after`), None on the last page.
    next_after: tuple[float, int] | None


def job_list(filters: ListFilter, limit: int) -> Select:
    """One page of a tab, newest first. Live rows are keyed by id alone (the cursor's
    first element is unused); finished rows by (finished_at, id), the order their
    partial index keeps, so a page deep in the history costs what the first one does."""
    if filters.state in FINISHED_STATES:
        key: Sequence[ColumnElement[Any]] = (jobs.c.finished_at, jobs.c.id)
        where = FINISHED_STATES[filters.state]
    else:
        key = (jobs.c.id,)
        # LIVE itself is always a term, even for one state: SQLite only uses the partial
        # index when the query repeats its WHERE literally.
        where = LIVE
    stmt = select(*LIST_COLUMNS).where(where)
    if filters.state == "queued":
        stmt = stmt.where(jobs.c.state == QUEUED)
    elif filters.state == "running":
        stmt = stmt.where(jobs.c.state == RUNNING)
    if filters.queue is not None:
        stmt = stmt.where(jobs.c.queue == bindparam("queue"))
    if filters.kind is not None:
        stmt = stmt.where(jobs.c.kind == bindparam("kind"))
    if filters.after is not None:
        if len(key) == 2:
            stmt = stmt.where(
                tuple_(*key) < tuple_(bindparam("after_at", type_=Double), bindparam("after_id"))
            )
        else:
            stmt = stmt.where(jobs.c.id < bindparam("after_id"))
    return stmt.order_by(*(column.desc() for column in key)).limit(limit + 1)


def list_params(filters: ListFilter) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if filters.queue is not None:
        params["queue"] = filters.queue
    if filters.kind is not None:
        params["kind"] = filters.kind
    if filters.after is not None:
        params["after_at"], params["after_id"] = filters.after
    return params


def read_page(conn: Connection, filters: ListFilter, limit: int) -> JobPage:
    rows = conn.execute(job_list(filters, limit), list_params(filters)).all()
    if len(rows) <= limit:
        return JobPage(rows, None)
    last = rows[limit - 1]
    return JobPage(rows[:limit], (last.finished_at or 0.0, last.id))


def by_dedupe_key() -> Select:
    return select(jobs.c.id).where(jobs.c.dedupe_key == bindparam("dedupe_key"))


def live_counts() -> Select:
    """Live jobs per queue, kind and state, with how many are ready and the oldest
    ready one's age: the live partial index only (as `stats()`, R16)."""
    ready = (jobs.c.visible_at <= NOW) & (jobs.c.attempts < jobs.c.max_attempts)
    return (
        select(
            jobs.c.queue,
            jobs.c.kind,
            jobs.c.state,
            func.count().label("jobs"),
            func.count().filter(ready).label("ready"),
            (NOW - func.min(jobs.c.visible_at).filter(ready)).label("oldest_ready_age"),
        )
        .where(LIVE)
        .group_by(jobs.c.queue, jobs.c.kind, jobs.c.state)
    )


def counts(in_state: ColumnElement[bool]) -> Select:
    """Dead (or cancelled) jobs per queue and kind, from that state's partial index. Done
    jobs are not counted: that would read every finished row; the last hour's are."""
    return (
        select(jobs.c.queue, jobs.c.kind, func.count().label("jobs"))
        .where(in_state)
        .group_by(jobs.c.queue, jobs.c.kind)
    )


COUNTED = {"dead": counts(IS_DEAD), "cancelled": counts(IS_CANCELLED)}


def finished(in_state: ColumnElement[bool]) -> Select:
    """Jobs that ended in `state` over the last hour, per queue and minute, read as a
    range of the done (or dead) index's finished_at."""
    since = NOW - WINDOW_SECONDS
    bucket = cast((jobs.c.finished_at - since) / BUCKET_SECONDS, Integer).label("bucket")
    return (
        select(jobs.c.queue, bucket, func.count().label("jobs"))
        .where(in_state, jobs.c.finished_at >= since)
        .group_by(jobs.c.queue, bucket)
    )


FINISHED = {"done": finished(IS_DONE), "dead": finished(IS_DEAD)}


@dataclass
class QueueFigures:
    """One queue's row on the overview page."""

    name: str
    queued: int = 0
    running: int = 0
    ready: int = 0
    dead: int = 0
    cancelled: int = 0
    oldest_ready_age: float = 0.0
    done_last_hour: int = 0
    dead_last_hour: int = 0


@dataclass
class Overview:
    queues: list[QueueFigures]
    #: Per state ("done", "dead"): jobs finished in each minute of the last hour, oldest first.
    per_minute: dict[str, list[int]]
    #: (queue, kind, state) -> jobs, for the metrics exporter; dead included, done not.
    by_kind: dict[tuple[str, str, str], int]
    #: (queue, kind) -> the oldest ready job's age in seconds.
    oldest_by_kind: dict[tuple[str, str], float]


def read_overview(conn: Connection, now: float) -> Overview:
    figures: dict[str, QueueFigures] = {}
    by_kind: dict[tuple[str, str, str], int] = {}
    oldest_by_kind: dict[tuple[str, str], float] = {}

    def queue(name: str) -> QueueFigures:
        return figures.setdefault(name, QueueFigures(name))

    for row in conn.execute(live_counts(), {"now": now}):
        entry = queue(row.queue)
        setattr(entry, row.state, getattr(entry, row.state) + row.jobs)
        entry.ready += row.ready
        by_kind[(row.queue, row.kind, row.state)] = row.jobs
        if row.oldest_ready_age is not None:
            age = max(0.0, float(row.oldest_ready_age))
            entry.oldest_ready_age = max(entry.oldest_ready_age, age)
            oldest_by_kind[(row.queue, row.kind)] = age
    for state, stmt in COUNTED.items():
        for row in conn.execute(stmt):
            entry = queue(row.queue)
            setattr(entry, state, getattr(entry, state) + row.jobs)
            by_kind[(row.queue, row.kind, state)] = row.jobs
    buckets = WINDOW_SECONDS // BUCKET_SECONDS
    per_minute = {state: [0] * buckets for state in FINISHED}
    for state, stmt in FINISHED.items():
        for row in conn.execute(stmt, {"now": now}):
            entry = queue(row.queue)
            setattr(entry, f"{state}_last_hour", getattr(entry, f"{state}_last_hour") + row.jobs)
            per_minute[state][min(max(row.bucket, 0), buckets - 1)] += row.jobs
    return Overview(
        sorted(figures.values(), key=lambda f: f.name), per_minute, by_kind, oldest_by_kind
    )
