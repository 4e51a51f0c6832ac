"""PostgreSQL: per-table autovacuum and fillfactor for a table updated all the time.

Every claim, complete and purge leaves dead tuples, and the claim walks the partial
ready index from its start, where the dead entries of finished jobs pile up until a
VACUUM removes them. Stock autovacuum waits for 20% of the table to be dead, which on a
table that keeps days of finished jobs may be never, and then runs throttled. Here it
runs as soon as a thousand rows are dead, whatever the table's size, unthrottled (a
queue table's live part is small, so each run is short), and statistics follow the
churn. A lower fillfactor leaves room on each page for the new row versions that every
update writes. SQLite needs none of this: nothing happens there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"
SETTINGS = {
    "fillfactor": "80",
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0",
    "autovacuum_vacuum_insert_threshold": "10000",
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "10000",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    options = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    op.execute(f"ALTER TABLE {TABLE} SET ({options})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE {TABLE} RESET ({', '.join(SETTINGS)})")
