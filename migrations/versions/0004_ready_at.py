"""`ready_at`: when a claimed job's attempt became ready, for its time in queue.

A worker's `queuecore_job_queue_seconds` (issue 14) is the time from a job being ready
to its handler starting. The ready time is the row's `visible_at` as the claim found it
(the enqueue, the end of a delay or a backoff, or of a lost lease), and the claim
overwrites `visible_at` with the lease's end in the same statement. A one-job claim is
one `UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING`, whose RETURNING sees new values
only (and on SQLite cannot name another FROM item either), so the claim keeps the old
value in this column (`SET ready_at = visible_at` reads the row as it was) and returns it.

The column is nullable with no default: rows written before this revision have none
until their next claim. Adding it is a change of the catalog only on both dialects (no
table rewrite, no rebuild on SQLite), so an upgrade is instant whatever the table holds,
and no index changes: the claim's plan stays as it was (R19).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("ready_at", sa.Double))


def downgrade() -> None:
    """Back to 0003: the column goes (SQLite 3.35 and newer can drop a column in place)."""
    op.drop_column(TABLE, "ready_at")
