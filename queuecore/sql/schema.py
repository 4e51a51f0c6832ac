"""The jobs table and its indexes: the one definition both dialects and the migrations share.

Times are stored as seconds since the epoch (double precision) on both dialects, so
that lease arithmetic (``now + lease_seconds``) is one SQL expression everywhere and
the database server's clock can be used without interval types.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ColumnClause,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    literal_column,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

metadata = MetaData()

# State names rendered as SQL literals, never as bound parameters: SQLite's planner
# can only match a partial index's WHERE against literal terms.
QUEUED: ColumnClause[Any] = literal_column("'queued'")
RUNNING: ColumnClause[Any] = literal_column("'running'")
DONE: ColumnClause[Any] = literal_column("'done'")
DEAD: ColumnClause[Any] = literal_column("'dead'")
CANCELLED: ColumnClause[Any] = literal_column("'cancelled'")
STATES = ("queued", "running", "done", "dead", "cancelled")
TERMINAL = ("done", "dead", "cancelled")

#: A JSON column where None is stored as SQL NULL, never as JSON null.
JSON_TYPE = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
#: A result of None is no result.
RESULT_TYPE = JSON_TYPE

jobs = Table(
    "queuecore_jobs",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("kind", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", JSON().with_variant(JSONB, "postgresql"), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("visible_at", Double, nullable=False),
    Column("lease_token", Text),
    Column("worker", Text),
    Column("last_error", Text),
    Column("dedupe_key", Text),
    Column("created_at", Double, nullable=False),
    Column("finished_at", Double),
    # 0003: what the completion handed back (R24), whether a `wait()` listens for the
    # job's end (PostgreSQL's NOTIFY trigger), and the trace context of issue 14.
    Column("result", RESULT_TYPE),
    Column("awaited", Boolean),
    Column("trace_context", Text),
    # 0004: the `visible_at` the last claim found, when that attempt became ready, written
    # by the claim itself (`statements._claimed`): its time in queue is claim - ready_at.
    Column("ready_at", Double),
    # 0005: every failed attempt of the job (R32), written with the failure itself
    # (`queuecore.sql.attempt_errors`); NULL until the first. `last_error` stays, so the
    # previous release reads and writes what it knows while an upgrade rolls out.
    Column("errors", JSON_TYPE),
    # 0006: when a worker's slot started the current attempt's handler (W9), written by
    # the worker within about half a second of it; NULL from the claim until then, so a
    # job held ahead of a slot shows as such. The claim sets it back to NULL.
    Column("started_at", Double),
    CheckConstraint(
        "state IN ('queued', 'running', 'done', 'dead', 'cancelled')",
        name="ck_queuecore_jobs_state",
    ),
    CheckConstraint("max_attempts >= 1", name="ck_queuecore_jobs_max_attempts"),
    UniqueConstraint("dedupe_key", name="uq_queuecore_jobs_dedupe_key"),
    # A purged id is never handed out again, so `get(id)` can't show somebody else's job.
    sqlite_autoincrement=True,
)

#: R33: one row per worker, written when it starts and on its heartbeat (0005).
workers = Table(
    "queuecore_workers",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", JSON_TYPE),  # None: every queue
    Column("kinds", JSON_TYPE, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("heartbeat_seconds", Double, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("last_seen_at", Double, nullable=False),
    Column("running", Integer, nullable=False),
)

LIVE = jobs.c.state.in_([QUEUED, RUNNING])
IS_RUNNING = jobs.c.state == RUNNING
IS_DONE = jobs.c.state == DONE
IS_DEAD = jobs.c.state == DEAD
IS_CANCELLED = jobs.c.state == CANCELLED

#: The dialects whose indexes take a WHERE: the finished rows are left out of them.
PARTIAL_INDEX_DIALECTS = ("sqlite", "postgresql")


def partial_index(name: str, where: ColumnElement[bool], *columns: Column[Any]) -> Index:
    """An index of the rows `where` holds for, on every dialect that has partial indexes."""
    wheres: dict[str, Any] = {f"{dialect}_where": where for dialect in PARTIAL_INDEX_DIALECTS}
    return Index(name, *columns, **wheres)


# The claim walks this in (priority, visible_at, id) order and stops after `limit`
# ready rows; finished rows are not in it, so their number does not matter.
partial_index("ix_queuecore_jobs_ready", LIVE, jobs.c.priority, jobs.c.visible_at, jobs.c.id)
partial_index(
    "ix_queuecore_jobs_ready_by_queue",
    LIVE,
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.visible_at,
    jobs.c.id,
)
# The retire step (R08) asks for `state = 'running'`, which SQLite cannot prove
# implies `state IN (...)`: it needs an index of its own.
partial_index("ix_queuecore_jobs_leases", IS_RUNNING, jobs.c.visible_at)
# Purge and the dead-letter views read these instead of scanning all finished rows.
partial_index("ix_queuecore_jobs_done", IS_DONE, jobs.c.finished_at)
partial_index("ix_queuecore_jobs_dead", IS_DEAD, jobs.c.queue, jobs.c.finished_at)
partial_index("ix_queuecore_jobs_cancelled", IS_CANCELLED, jobs.c.queue, jobs.c.finished_at)
