"""Fault tests reuse the conformance fixtures (backend, clock, databases), and add a
PostgreSQL database private to one test: they kill processes, terminate connections
and add tables of their own, none of which may leak into another test."""

from __future__ import annotations

from typing import Any

import pytest

import queuecore
from tests.conformance.conftest import backend, clock, dsn, postgres_database, sqlite_template

__all__ = ["backend", "clock", "dsn", "postgres_database", "private_dsn", "sqlite_template"]


@pytest.fixture
def private_dsn(backend: str, request: pytest.FixtureRequest) -> str:
    """A migrated, empty database that no other test touches (a SQLite `dsn` already is)."""
    if backend == "sqlite":
        return request.getfixturevalue("dsn")
    scratch: Any = request.getfixturevalue("scratch_databases")
    url = scratch.create()
    queuecore.migrate(url)
    return url
