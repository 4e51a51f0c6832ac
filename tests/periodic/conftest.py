"""Periodic-job tests reuse the conformance fixtures: every test on both backends, its
own migrated database, a fake clock."""

from tests.conformance.conftest import (
    backend,
    clock,
    dsn,
    make_queue,
    postgres_database,
    queue,
    sqlite_template,
)

__all__ = [
    "backend",
    "clock",
    "dsn",
    "make_queue",
    "postgres_database",
    "queue",
    "sqlite_template",
]
