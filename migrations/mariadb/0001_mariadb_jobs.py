"""MariaDB's jobs table: the columns of the shared chain's head (0004), built for InnoDB.

MariaDB has no partial indexes, so the claim cannot be kept off finished rows the way
SQLite and PostgreSQL keep it (R19). A virtual generated column, `live_priority`, holds
the priority of a live row and NULL for a finished one; the claim walks the index
`(live_priority, visible_at, id)` from its first non-NULL entry, in claim order, and
never reaches the finished rows (ADR 0012 has the plans over 100,000 of them). Every
other read of finished rows leads with `state`, so it reads one state's rows only.

Keys are VARCHAR, not TEXT: InnoDB cuts an index on TEXT to a prefix, and a unique key
on TEXT is a hash. Text compares byte for byte, trailing spaces included
(`utf8mb4_nopad_bin`), as it does on the other backends: a queue called "Mail" is not
"mail", and a dedupe key "a " is not "a".

MariaDB commits each DDL statement on its own, so this revision is not undone if it
stops halfway: each statement checks that its object is not there yet, and running the
revision again finishes it.

Revision ID: mariadb_0001
Revises:
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "mariadb_0001"
down_revision = None
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"

CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id BIGINT NOT NULL AUTO_INCREMENT,
    kind VARCHAR(255) NOT NULL,
    queue VARCHAR(255) NOT NULL,
    payload JSON NOT NULL,
    priority INTEGER NOT NULL,
    state VARCHAR(16) NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    visible_at DOUBLE NOT NULL,
    lease_token VARCHAR(64),
    worker TEXT,
    last_error TEXT,
    dedupe_key VARCHAR(512),
    created_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    result JSON,
    awaited BOOL,
    trace_context TEXT,
    ready_at DOUBLE,
    live_priority INTEGER AS (IF(state IN ('queued', 'running'), priority, NULL)) VIRTUAL,
    PRIMARY KEY (id),
    CONSTRAINT uq_queuecore_jobs_dedupe_key UNIQUE (dedupe_key),
    CONSTRAINT ck_queuecore_jobs_state
        CHECK (state IN ('queued', 'running', 'done', 'dead', 'cancelled')),
    CONSTRAINT ck_queuecore_jobs_max_attempts CHECK (max_attempts >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin
"""

#: (name, columns): the claim's walk, alone and by queue; R08's lost leases; purge;
#: and the dead list with the dead and cancelled counts.
INDEXES = (
    ("ix_queuecore_jobs_ready", "live_priority, visible_at, id"),
    ("ix_queuecore_jobs_ready_by_queue", "queue, live_priority, visible_at, id"),
    ("ix_queuecore_jobs_leases", "state, visible_at"),
    ("ix_queuecore_jobs_finished", "state, finished_at"),
    ("ix_queuecore_jobs_state", "state, queue, finished_at"),
)


def upgrade() -> None:
    op.execute(CREATE_TABLE)
    for name, columns in INDEXES:
        op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE} ({columns})")


def downgrade() -> None:
    op.execute(f"DROP TABLE {TABLE}")
