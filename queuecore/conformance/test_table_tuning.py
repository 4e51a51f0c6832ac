"""Migration 0002: PostgreSQL's queue table keeps its claim fast through churn by
per-table autovacuum and fillfactor settings (docs/contract.md, Traps: bloat); on SQLite
it changes nothing. Timing is the benchmark's business: here only the settings are checked.
It runs on the postgresql harness only: SQLite has no such settings to check."""

from __future__ import annotations

import importlib

import pytest
import sqlalchemy as sa

tuning = importlib.import_module("queuecore.migrations.versions.0002_postgresql_vacuum")


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_queue_table_has_its_vacuum_settings(dsn):
    engine = sa.create_engine(dsn)
    with engine.connect() as conn:
        options = conn.execute(
            sa.text("SELECT reloptions FROM pg_class WHERE relname = 'queuecore_jobs'")
        ).scalar()
    engine.dispose()
    assert dict(option.split("=", 1) for option in options) == tuning.SETTINGS
