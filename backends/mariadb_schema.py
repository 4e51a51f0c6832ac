"""MariaDB's jobs table as SQLAlchemy models, for what compares the database with its
models (`queuecore.migrate.models`, the kit's drift check): the columns of
`queuecore.sql.schema.jobs` with the types migrations/mariadb gives them, its generated
column and its indexes. The statements are written on `queuecore.sql.schema.jobs`: the
names are the same. The migrations, not this, build the table."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from queuecore.sql.schema import jobs, workers

metadata = MetaData()

mariadb_jobs = Table(
    jobs.name,
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("kind", String(255), nullable=False),
    Column("queue", String(255), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("visible_at", Double, nullable=False),
    Column("lease_token", String(64)),
    Column("worker", Text),
    Column("last_error", Text),
    Column("dedupe_key", String(512)),
    Column("created_at", Double, nullable=False),
    Column("finished_at", Double),
    Column("result", JSON(none_as_null=True)),
    Column("awaited", Boolean),
    Column("trace_context", Text),
    Column("ready_at", Double),
    Column("errors", JSON(none_as_null=True)),
    Column("started_at", Double),
    Column(
        "live_priority",
        Integer,
        Computed("IF(state IN ('queued', 'running'), priority, NULL)", persisted=False),
    ),
    CheckConstraint(
        "state IN ('queued', 'running', 'done', 'dead', 'cancelled')",
        name="ck_queuecore_jobs_state",
    ),
    CheckConstraint("max_attempts >= 1", name="ck_queuecore_jobs_max_attempts"),
    UniqueConstraint("dedupe_key", name="uq_queuecore_jobs_dedupe_key"),
)

c = mariadb_jobs.c
Index("ix_queuecore_jobs_ready", c.live_priority, c.visible_at, c.id)
Index("ix_queuecore_jobs_ready_by_queue", c.queue, c.live_priority, c.visible_at, c.id)
Index("ix_queuecore_jobs_leases", c.state, c.visible_at)
Index("ix_queuecore_jobs_finished", c.state, c.finished_at)
Index("ix_queuecore_jobs_state", c.state, c.queue, c.finished_at)

#: R33's table, as migrations/mariadb/0002 builds it.
mariadb_workers = Table(
    workers.name,
    metadata,
    Column("name", String(255), primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", JSON(none_as_null=True)),
    Column("kinds", JSON(none_as_null=True), nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("heartbeat_seconds", Double, nullable=False),
    Column("started_at", Double, nullable=False),
    Column("last_seen_at", Double, nullable=False),
    Column("running", Integer, nullable=False),
)
