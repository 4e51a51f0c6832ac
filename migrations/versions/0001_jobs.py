"""The jobs table, with named queues, priorities and the partial indexes over live rows.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def _where(condition: str) -> dict[str, sa.TextClause]:
    clause = sa.text(condition)
    return {"sqlite_where": clause, "postgresql_where": clause}


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", sa.JSON().with_variant(JSONB, "postgresql"), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("visible_at", sa.Double, nullable=False),
        sa.Column("lease_token", sa.Text),
        sa.Column("worker", sa.Text),
        sa.Column("last_error", sa.Text),
        sa.Column("dedupe_key", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'dead')", name="ck_queuecore_jobs_state"
        ),
        sa.CheckConstraint("max_attempts >= 1", name="ck_queuecore_jobs_max_attempts"),
        sa.UniqueConstraint("dedupe_key", name="uq_queuecore_jobs_dedupe_key"),
        sqlite_autoincrement=True,
    )
    live = _where("state IN ('queued', 'running')")
    op.create_index("ix_queuecore_jobs_ready", TABLE, ["priority", "visible_at", "id"], **live)
    op.create_index(
        "ix_queuecore_jobs_ready_by_queue", TABLE, ["queue", "priority", "visible_at", "id"], **live
    )
    op.create_index(
        "ix_queuecore_jobs_leases", TABLE, ["visible_at"], **_where("state = 'running'")
    )
    op.create_index("ix_queuecore_jobs_done", TABLE, ["finished_at"], **_where("state = 'done'"))
    op.create_index(
        "ix_queuecore_jobs_dead", TABLE, ["queue", "finished_at"], **_where("state = 'dead'")
    )


def downgrade() -> None:
    op.drop_table(TABLE)
