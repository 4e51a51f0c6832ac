"""Results, the cancelled state, waiting for a job, and a column for trace context.

- `result` (JSON, NULL while there is none): what a completion handed back (R24);
- `cancelled` joins the states (R25), with a partial index of its own for purge and stats;
- `awaited`: set by `wait()` on PostgreSQL, where a row trigger NOTIFYs the channel
  `queuecore_finished` when such a job reaches a terminal state (R26). The trigger's WHEN
  clause keeps every other completion free of NOTIFY and of its global lock at commit;
- `trace_context` (text): unused by this revision; the OpenTelemetry work (issue 14)
  keeps the producer's trace context there so a worker can continue the trace.

SQLite cannot change a CHECK constraint in place, so there the table is rebuilt in the
migration's transaction: rows are copied with their ids, and the AUTOINCREMENT counter is
carried over, so an id that was purged before the upgrade is still never handed out.
On PostgreSQL the new CHECK is added NOT VALID and then validated, which scans the table
without blocking writes for the scan's duration.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLE = "queuecore_jobs"
CHECK = "ck_queuecore_jobs_state"
STATES_0003 = "state IN ('queued', 'running', 'done', 'dead', 'cancelled')"
STATES_0001 = "state IN ('queued', 'running', 'done', 'dead')"
OLD_COLUMNS = (
    "id, kind, queue, payload, priority, state, attempts, max_attempts, visible_at, "
    "lease_token, worker, last_error, dedupe_key, created_at, finished_at"
)
NOTIFY_FUNCTION = "queuecore_notify_finished"
NOTIFY_TRIGGER = "queuecore_jobs_finished"


def _where(condition: str) -> dict[str, sa.TextClause]:
    clause = sa.text(condition)
    return {"sqlite_where": clause, "postgresql_where": clause}


def _result_type() -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite()
    else:
        _alter_postgresql()
    op.create_index(
        "ix_queuecore_jobs_cancelled",
        TABLE,
        ["queue", "finished_at"],
        **_where("state = 'cancelled'"),
    )


def _alter_postgresql() -> None:
    op.add_column(TABLE, sa.Column("result", _result_type()))
    op.add_column(TABLE, sa.Column("awaited", sa.Boolean))
    op.add_column(TABLE, sa.Column("trace_context", sa.Text))
    op.drop_constraint(CHECK, TABLE, type_="check")
    op.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {CHECK} CHECK ({STATES_0003}) NOT VALID")
    op.execute(f"ALTER TABLE {TABLE} VALIDATE CONSTRAINT {CHECK}")
    op.execute(
        f"""
        CREATE FUNCTION {NOTIFY_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('queuecore_finished', NEW.id::text);
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER {NOTIFY_TRIGGER} AFTER UPDATE OF state ON {TABLE}
        FOR EACH ROW
        WHEN (NEW.awaited AND NEW.state IN ('done', 'dead', 'cancelled'))
        EXECUTE FUNCTION {NOTIFY_FUNCTION}()
        """
    )


def _rebuild_sqlite() -> None:
    bind = op.get_bind()
    counter = bind.exec_driver_sql(
        "SELECT seq FROM sqlite_sequence WHERE name = ?", (TABLE,)
    ).scalar()
    new = f"{TABLE}_0003"
    op.create_table(
        new,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
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
        sa.Column("result", _result_type()),
        sa.Column("awaited", sa.Boolean),
        sa.Column("trace_context", sa.Text),
        sa.CheckConstraint(STATES_0003, name=CHECK),
        sa.CheckConstraint("max_attempts >= 1", name="ck_queuecore_jobs_max_attempts"),
        sa.UniqueConstraint("dedupe_key", name="uq_queuecore_jobs_dedupe_key"),
        sqlite_autoincrement=True,
    )
    op.execute(f"INSERT INTO {new} ({OLD_COLUMNS}) SELECT {OLD_COLUMNS} FROM {TABLE}")
    op.drop_table(TABLE)  # its indexes go with it
    op.rename_table(new, TABLE)
    if counter is not None:
        bind.exec_driver_sql(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (counter, TABLE)
        )
    _create_0001_indexes()


def _create_0001_indexes() -> None:
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
    """Back to 0002 on PostgreSQL, only while no job is cancelled (0002 cannot hold one);
    results are dropped. On SQLite, restore the file copied before the upgrade instead."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        raise NotImplementedError("downgrading SQLite from 0003: restore a copy of the file")
    cancelled = bind.exec_driver_sql(
        f"SELECT count(*) FROM {TABLE} WHERE state = 'cancelled'"
    ).scalar()
    if cancelled:
        raise RuntimeError(
            f"{cancelled} cancelled job(s): revision 0002 has no such state; purge them first"
        )
    op.drop_index("ix_queuecore_jobs_cancelled", TABLE)
    op.execute(f"DROP TRIGGER {NOTIFY_TRIGGER} ON {TABLE}")
    op.execute(f"DROP FUNCTION {NOTIFY_FUNCTION}()")
    op.drop_constraint(CHECK, TABLE, type_="check")
    op.create_check_constraint(CHECK, TABLE, STATES_0001)
    for column in ("result", "awaited", "trace_context"):
        op.drop_column(TABLE, column)
