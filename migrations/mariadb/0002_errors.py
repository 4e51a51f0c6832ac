"""`errors`: every failed attempt of a job (R32), as the shared chain's 0005 adds it.

MariaDB commits each DDL statement on its own: the column is added only where it is not
there yet (`ADD COLUMN IF NOT EXISTS`), and the backfill writes only rows with no history
yet, so running the revision again after a stop halfway finishes it. `last_error` stays
(expand, then contract; ADR 0014): the previous release keeps working during an upgrade.

Jobs that failed before the upgrade keep their last error as their history's one entry
(attempt: the job's attempts; time: its finish, else its creation, the nearest the row
kept).

Revision ID: mariadb_0002
Revises: mariadb_0001
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "mariadb_0002"
down_revision = "mariadb_0001"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def upgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS errors JSON")
    op.execute(
        f"UPDATE {TABLE} SET errors = JSON_ARRAY(JSON_OBJECT("
        "'attempt', attempts, 'at', COALESCE(finished_at, created_at), 'error', last_error))"
        " WHERE last_error IS NOT NULL AND errors IS NULL"
    )


def downgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS errors")
