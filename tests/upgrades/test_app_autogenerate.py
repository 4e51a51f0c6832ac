"""R36: the application's own `alembic revision --autogenerate`, run against a database
that holds queuecore's schema, proposes its own table and nothing of queuecore's, when
its env.py passes `queuecore.alembic`'s hooks; without them it would drop every job."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

import queuecore
from queuecore.migrate import current_revision, head_revision
from tests.upgrades.app import alembic, autogenerate, make_app


def test_r36_autogenerate_writes_the_apps_table_and_nothing_of_queuecores(
    tmp_path: Path, empty_dsn: str
) -> None:
    queuecore.migrate(empty_dsn)
    with queuecore.connect(empty_dsn) as queue:
        job = queue.enqueue("email", {"to": "a@example.com"}).id
    app = make_app(tmp_path / "app", empty_dsn)

    revision, said = autogenerate(app)

    assert "op.create_table('orders'" in revision
    assert "op.create_index('ix_orders_job_id'" in revision
    assert "queuecore" not in revision.lower(), revision
    assert "queuecore" not in said.lower(), said
    alembic(app, "upgrade", "head")  # the revision applied, as a user would
    engine = sa.create_engine(empty_dsn)
    try:
        assert sa.inspect(engine).has_table("orders")
        assert current_revision(engine) == head_revision(engine)
    finally:
        engine.dispose()
    with queuecore.connect(empty_dsn) as queue:
        snapshot = queue.get(job)
        assert snapshot is not None and snapshot.state == "queued"


def test_without_the_hooks_autogenerate_would_drop_queuecores_tables(
    tmp_path: Path, empty_dsn: str
) -> None:
    """The other test's proof that it can fail: the same app, env.py as alembic made it."""
    queuecore.migrate(empty_dsn)
    app = make_app(tmp_path / "app", empty_dsn, hooks=False)

    revision, _ = autogenerate(app)

    assert "op.drop_table('queuecore_jobs')" in revision
    assert "op.drop_table('queuecore_alembic_version')" in revision
