"""`errors`: every failed attempt of a job (R32), and `queuecore_workers`, one row per
running worker (R33), as the shared chain's 0005 adds them.

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


CREATE_WORKERS = """
CREATE TABLE IF NOT EXISTS queuecore_workers (
    name VARCHAR(255) NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues JSON,
    kinds JSON NOT NULL,
    concurrency INTEGER NOT NULL,
    heartbeat_seconds DOUBLE NOT NULL,
    started_at DOUBLE NOT NULL,
    last_seen_at DOUBLE NOT NULL,
    running INTEGER NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin
"""


def upgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS errors JSON")
    op.execute(
        f"UPDATE {TABLE} SET errors = JSON_ARRAY(JSON_OBJECT("
        "'attempt', attempts, 'at', COALESCE(finished_at, created_at), 'error', last_error))"
        " WHERE last_error IS NOT NULL AND errors IS NULL"
    )
    op.execute(CREATE_WORKERS)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS queuecore_workers")
    op.execute(f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS errors")
