"""Dashboard tests reuse the conformance fixtures: every test on both backends, its own
migrated database."""

from collections.abc import Callable

import pytest

import queuecore
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
    "connect",
    "db",
    "dsn",
    "make_queue",
    "postgres_database",
    "queue",
    "sqlite_template",
]


@pytest.fixture
def connect() -> Callable[..., queuecore.Queue]:
    """The conformance `make_queue` opens its queues with this: here the sync queue only
    (the conformance suite alone runs on the async face too)."""
    return queuecore.connect
