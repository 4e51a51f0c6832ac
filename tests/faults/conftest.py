"""Fault tests reuse the conformance fixtures (backend, clock, databases), and add a
PostgreSQL database private to one test: they kill processes, terminate connections
and add tables of their own, none of which may leak into another test."""

from __future__ import annotations

from typing import Any

import pytest

import queuecore


@pytest.fixture
def private_dsn(backend: str, request: pytest.FixtureRequest) -> str:
    """A migrated, empty database that no other test touches (a SQLite `dsn` already is)."""
    if backend == "sqlite":
        return request.getfixturevalue("dsn")
    scratch: Any = request.getfixturevalue("scratch_databases")
    url = scratch.create()
    queuecore.migrate(url)
    return url
