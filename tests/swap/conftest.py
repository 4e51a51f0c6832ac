"""The backend swap reuses the conformance fixtures: every test on both backends, each
with its own migrated database."""

from tests.conformance.conftest import (
    backend,
    clock,
    dsn,
    empty_dsn,
    make_queue,
    postgres_database,
    queue,
    sqlite_template,
)

__all__ = [
    "backend",
    "clock",
    "dsn",
    "empty_dsn",
    "make_queue",
    "postgres_database",
    "queue",
    "sqlite_template",
]
