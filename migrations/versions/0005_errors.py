"""`errors`: every failed attempt of a job (R32), not only the last; `queuecore_workers`:
one row per running worker (R33).

A nullable JSON column (JSONB on PostgreSQL), appended to by the statement that records
a failure. Adding it changes the catalog only (no table rewrite, no index change), and
`last_error` stays as it was: the previous release neither reads nor writes `errors`,
so it keeps working while an upgrade rolls out (expand, then contract; ADR 0014).

Jobs that failed before the upgrade keep their last error as their history's one entry:
its attempt is the job's attempts, and its time the nearest one the row kept (the job's
finish, else its creation), since no earlier revision stored when an attempt failed.

The workers table is new: the previous release never reads it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.add_column(TABLE, sa.Column("errors", JSONB if postgresql else sa.JSON))
    op.execute(backfill(postgresql))
    json = JSONB if postgresql else sa.JSON
    op.create_table(
        "queuecore_workers",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("queues", json),
        sa.Column("kinds", json, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("heartbeat_seconds", sa.Double, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("last_seen_at", sa.Double, nullable=False),
        sa.Column("running", sa.Integer, nullable=False),
    )


def backfill(postgresql: bool) -> sa.Update:
    """A job's `last_error` as its one entry, where it has one and no history yet."""
    jobs = sa.table(
        TABLE,
        sa.column("attempts"),
        sa.column("last_error"),
        sa.column("finished_at"),
        sa.column("created_at"),
        sa.column("errors"),
    )
    obj, array = (
        (sa.func.jsonb_build_object, sa.func.jsonb_build_array)
        if postgresql
        else (sa.func.json_object, sa.func.json_array)
    )
    entry = obj(
        "attempt",
        jobs.c.attempts,
        "at",
        sa.func.coalesce(jobs.c.finished_at, jobs.c.created_at),
        "error",
        jobs.c.last_error,
    )
    return (
        sa.update(jobs)
        .where(jobs.c.last_error.is_not(None), jobs.c.errors.is_(None))
        .values(errors=array(entry))
    )


def downgrade() -> None:
    """Back to 0004: the table and the column go (SQLite 3.35 and newer can drop a column
    in place)."""
    op.drop_table("queuecore_workers")
    op.drop_column(TABLE, "errors")
