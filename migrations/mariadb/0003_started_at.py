"""`started_at`: when a worker's slot started the current attempt's handler (W9), as
the shared chain's 0006 adds it. Only where it is not there yet (`ADD COLUMN IF NOT
EXISTS`): MariaDB commits each DDL statement on its own, so running the revision again
after a stop finishes it.

Revision ID: mariadb_0003
Revises: mariadb_0002
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "mariadb_0003"
down_revision = "mariadb_0002"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def upgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS started_at DOUBLE")


def downgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS started_at")
