"""The jobs table and its indexes: the one definition both dialects and the migrations share.

Times are stored as seconds since the epoch (double precision) on both dialects, so
that lease arithmetic (``now + lease_seconds``) is one SQL expression everywhere and
the database server's clock can be used without interval types.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    literal_column,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

# State names rendered as SQL literals, never as bound parameters: SQLite's planner
# can only match a partial index's WHERE against literal terms.
QUEUED = literal_column("'queued'")
RUNNING = literal_column("'running'")
DONE = literal_column("'done'")
DEAD = literal_column("'dead'")
STATES = ("queued", "running", "done", "dead")

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
    CheckConstraint(
        "state IN ('queued', 'running', 'done', 'dead')", name="ck_queuecore_jobs_state"
    ),
    CheckConstraint("max_attempts >= 1", name="ck_queuecore_jobs_max_attempts"),
    UniqueConstraint("dedupe_key", name="uq_queuecore_jobs_dedupe_key"),
    # A purged id is never handed out again, so `get(id)` can't show somebody else's job.
    sqlite_autoincrement=True,
)

LIVE = jobs.c.state.in_([QUEUED, RUNNING])
IS_RUNNING = jobs.c.state == RUNNING
IS_DONE = jobs.c.state == DONE
IS_DEAD = jobs.c.state == DEAD

# The claim walks this in (priority, visible_at, id) order and stops after `limit`
# ready rows; finished rows are not in it, so their number does not matter.
Index(
    "ix_queuecore_jobs_ready",
    jobs.c.priority,
    jobs.c.visible_at,
    jobs.c.id,
    sqlite_where=LIVE,
    postgresql_where=LIVE,
)
Index(
    "ix_queuecore_jobs_ready_by_queue",
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.visible_at,
    jobs.c.id,
    sqlite_where=LIVE,
    postgresql_where=LIVE,
)
# The retire step (R08) asks for `state = 'running'`, which SQLite cannot prove
# implies `state IN (...)`: it needs an index of its own.
Index(
    "ix_queuecore_jobs_leases",
    jobs.c.visible_at,
    sqlite_where=IS_RUNNING,
    postgresql_where=IS_RUNNING,
)
# Purge and the dead-letter views read these instead of scanning all finished rows.
Index(
    "ix_queuecore_jobs_done",
    jobs.c.finished_at,
    sqlite_where=IS_DONE,
    postgresql_where=IS_DONE,
)
Index(
    "ix_queuecore_jobs_dead",
    jobs.c.queue,
    jobs.c.finished_at,
    sqlite_where=IS_DEAD,
    postgresql_where=IS_DEAD,
)
