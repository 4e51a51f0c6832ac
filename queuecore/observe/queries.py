"""What the dashboard reads, as statements over the partial indexes only.

A dashboard left open on a table with millions of finished rows must cost the queue
nothing: every list reads one partial index (live, done or dead rows; the dead tab
also the leases index, see below), never the whole table, and keyset pagination
(`WHERE key < last key seen`) replaces OFFSET, which would walk every skipped row.
Lookups by id or dedupe key go through the primary key and the unique index.
tests/dashboard/test_plans.py asserts these plans on both dialects.

Time is a bound value read from the queue's own clock (`Queue.now()`, R20), so the
dashboard and the workers agree on what "ready" and "the last hour" mean.

Rows are read as `statements.seen` reports them (R08): a running job whose lease ended
on its last attempt is dead from that instant, though the row says `running` until a
claim writes it. It is listed and counted under dead, never under running; the part of
a query that finds such rows reads the leases index (running rows only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Double,
    Integer,
    Select,
    bindparam,
    cast,
    func,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.sql.elements import ColumnElement

from queuecore.core import validate
from queuecore.sql import statements
from queuecore.sql.schema import IS_CANCELLED, IS_DEAD, IS_DONE, LIVE, QUEUED, RUNNING, jobs

NOW = bindparam("now", type_=Double)
#: The job list's tabs, each read through its own partial index.
LISTS = ("live", "queued", "running", "done", "dead", "cancelled")
#: The finished tabs and the partial index each reads.
FINISHED_STATES = {"done": IS_DONE, "dead": IS_DEAD, "cancelled": IS_CANCELLED}
LIST_COLUMNS = (
    "id",
    "kind",
    "queue",
    "state",
    "priority",
    "attempts",
    "max_attempts",
    "visible_at",
    "created_at",
    "finished_at",
    "dedupe_key",
    "last_error",
)
#: A job list's columns as a read must report them (R08).
LISTED: list[ColumnElement[Any]] = [
    column for column in statements.seen(NOW) if column.name in LIST_COLUMNS
]
#: Running, its lease over on the last attempt: dead by R08, its row not yet written.
LAPSED = statements.lease_lost(NOW)
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
        for name in ("queue", "kind"):  # text no database can compare (NUL): no such job
            validate.searchable(name, getattr(self, name))
        if self.after is not None:
            at, job_id = self.after
            validate.job_id(job_id)
            if not math.isfinite(at):  # MariaDB cannot bind inf or nan
                raise ValueError(f"not a page cursor: {at!r}:{job_id}")


@dataclass(frozen=True)
class JobPage:
    rows: Sequence[Any]
    #: The cursor of the next page (its `after`), None on the last page.
    next_after: tuple[float, int] | None


def job_list(filters: ListFilter, limit: int) -> Select[Any]:
    """One page of a tab, newest first. Live rows are keyed by id alone (the cursor's
    first element is unused); finished rows by (finished_at, id), the order their
    partial index keeps, so a page deep in the history costs what the first one does."""
    if filters.state == "dead":
        return _dead_list(filters, limit)
    if filters.state in FINISHED_STATES:
        key: Sequence[ColumnElement[Any]] = (jobs.c.finished_at, jobs.c.id)
        where = FINISHED_STATES[filters.state]
    else:
        key = (jobs.c.id,)
        # LIVE itself is always a term, even for one state: SQLite only uses the partial
        # index when the query repeats its WHERE literally.
        where = LIVE
    stmt = _filtered(select(*LISTED).where(where), filters, key)
    if filters.state == "queued":
        stmt = stmt.where(jobs.c.state == QUEUED)
    elif filters.state == "running":
        stmt = stmt.where(jobs.c.state == RUNNING, ~LAPSED)
    elif filters.state == "live":
        stmt = stmt.where(~LAPSED)
    return stmt.order_by(*(column.desc() for column in key)).limit(limit + 1)


def _dead_list(filters: ListFilter, limit: int) -> Select[Any]:
    """The dead tab: the dead rows (their partial index), and the lapsed ones (the
    leases index), whose finish is their lease's end (`statements.seen`). Each part is
    a page of its own in its index's order; the page is the newest of the two."""
    parts = []
    for where, ended in ((IS_DEAD, jobs.c.finished_at), (LAPSED, jobs.c.visible_at)):
        key = (ended, jobs.c.id)
        part = _filtered(select(*LISTED).where(where), filters, key)
        part = part.order_by(*(column.desc() for column in key)).limit(limit + 1)
        parts.append(select(part.subquery()))  # SQLite: a compound's ORDER BY in a subquery
    listed = union_all(*parts).subquery("dead")
    return select(listed).order_by(listed.c.finished_at.desc(), listed.c.id.desc()).limit(limit + 1)


def _filtered(
    stmt: Select[Any], filters: ListFilter, key: Sequence[ColumnElement[Any]]
) -> Select[Any]:
    """The queue and kind filters, and the keyset cursor over `key`."""
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
    return stmt


def list_params(filters: ListFilter) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if filters.queue is not None:
        params["queue"] = filters.queue
    if filters.kind is not None:
        params["kind"] = filters.kind
    if filters.after is not None:
        params["after_at"], params["after_id"] = filters.after
    return params


def read_page(conn: Connection, filters: ListFilter, limit: int, now: float) -> JobPage:
    rows = conn.execute(job_list(filters, limit), {**list_params(filters), "now": now}).all()
    if len(rows) <= limit:
        return JobPage(rows, None)
    last = rows[limit - 1]
    return JobPage(rows[:limit], (last.finished_at or 0.0, last.id))


def by_dedupe_key() -> Select[Any]:
    return select(jobs.c.id).where(jobs.c.dedupe_key == bindparam("dedupe_key"))


#: Live jobs per queue, kind and state as seen (R08: lapsed ones are dead), with how many
#: are ready and the oldest ready one's age: the live partial index only (as `stats()`).
LIVE_COUNTS = statements.live_counts(NOW)


def counts(in_state: ColumnElement[bool]) -> Select[Any]:
    """Dead (or cancelled) jobs per queue and kind, from that state's partial index. Done
    jobs are not counted: that would read every finished row; the last hour's are."""
    return (
        select(jobs.c.queue, jobs.c.kind, func.count().label("jobs"))
        .where(in_state)
        .group_by(jobs.c.queue, jobs.c.kind)
    )


COUNTED = {"dead": counts(IS_DEAD), "cancelled": counts(IS_CANCELLED)}


def finished(in_state: ColumnElement[bool], ended: ColumnElement[float]) -> Select[Any]:
    """Jobs that ended in a state over the last hour, per queue and minute, read as a
    range of `ended` in that state's index (the done or dead index's finished_at; the
    leases index's visible_at for the lapsed, dead when their lease ended)."""
    since = NOW - WINDOW_SECONDS
    bucket = cast((ended - since) / BUCKET_SECONDS, Integer).label("bucket")
    return (
        select(jobs.c.queue, bucket, func.count().label("jobs"))
        .where(in_state, ended >= since)
        .group_by(jobs.c.queue, bucket)
    )


#: Per state, the statements whose counts add up to the jobs that reached it in the last
#: hour. Only done and dead: failures are the jobs that died, not the attempts that
#: failed and were retried (no row keeps those).
FINISHED = {
    "done": (finished(IS_DONE, jobs.c.finished_at),),
    "dead": (finished(IS_DEAD, jobs.c.finished_at), finished(LAPSED, jobs.c.visible_at)),
}


@dataclass
class QueueFigures:
    """One queue's row on the overview page."""

    name: str
    queued: int = 0
    running: int = 0
    #: Of the running ones, those held ahead of a slot, their handler not started (W9).
    held_ahead: int = 0
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

    def count(name: str, kind: str, state: str, jobs: int) -> None:
        entry = queue(name)
        setattr(entry, state, getattr(entry, state) + jobs)
        by_kind[(name, kind, state)] = by_kind.get((name, kind, state), 0) + jobs

    for row in conn.execute(LIVE_COUNTS, {"now": now}):
        count(row.queue, row.kind, row.state, row.jobs)
        entry = queue(row.queue)
        entry.ready += row.ready
        if row.state == "running":
            entry.held_ahead += row.jobs - row.started
        if row.oldest_ready_age is not None:
            age = max(0.0, float(row.oldest_ready_age))
            entry.oldest_ready_age = max(entry.oldest_ready_age, age)
            oldest_by_kind[(row.queue, row.kind)] = age
    for state, stmt in COUNTED.items():
        for row in conn.execute(stmt):
            count(row.queue, row.kind, state, row.jobs)
    buckets = WINDOW_SECONDS // BUCKET_SECONDS
    per_minute = {state: [0] * buckets for state in FINISHED}
    for state, parts in FINISHED.items():
        for stmt in parts:
            for row in conn.execute(stmt, {"now": now}):
                entry = queue(row.queue)
                field = f"{state}_last_hour"
                setattr(entry, field, getattr(entry, field) + row.jobs)
                per_minute[state][min(max(row.bucket, 0), buckets - 1)] += row.jobs
    return Overview(
        sorted(figures.values(), key=lambda f: f.name), per_minute, by_kind, oldest_by_kind
    )
