"""Dashboard tests reuse the conformance fixtures: every test on both backends, its own
migrated database."""

from tests.conformance.conftest import (
    backend,
    clock,
    db,
    dsn,
    make_queue,
    postgres_database,
    queue,
    sqlite_template,
)

__all__ = [
    "backend",
    "clock",
    "db",
    "dsn",
    "make_queue",
    "postgres_database",
    "queue",
    "sqlite_template",
]
