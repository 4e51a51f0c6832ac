"""`started_at`: when a worker's slot started the current attempt's handler (W9), so a
job's snapshot, `stats()` and the dashboard tell a job held ahead of a slot from one
that runs.

A nullable column, no backfill: running jobs of the previous release show as held ahead
until their next claim, and the previous release neither reads nor writes it, so it
keeps working while an upgrade rolls out (expand, then contract; ADR 0014). Adding it
changes the catalog only.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("started_at", sa.Double))


def downgrade() -> None:
    """Back to 0005: the column goes (SQLite 3.35 and newer drop a column in place)."""
    op.drop_column(TABLE, "started_at")
