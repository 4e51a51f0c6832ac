"""Test-wide fixtures: where the PostgreSQL half of the suite gets its server.

`QUEUECORE_TEST_POSTGRES_DSN` names a server (any database on it; the suite makes its
own). Without it, `postgres_server` finds one it can start (tests/pg_server.py). When
none can be had the PostgreSQL tests are skipped and the run ends with a banner saying
so, unless `QUEUECORE_REQUIRE_POSTGRES=1` (CI sets it), which turns that into an error.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa

from tests.pg_server import find_or_start_postgres, find_server_binaries

REQUIRE_POSTGRES = os.environ.get("QUEUECORE_REQUIRE_POSTGRES") == "1"

# The suite reads and writes its SQLite files behind the queue's back with plain engines
# and sqlite3 connections, which use the stdlib's SQLite library. Two SQLite libraries on
# one file in one process do not see each other's locks (sqlite.org/howtocorrupt.html,
# 2.2.1), so queuecore runs on the stdlib's too, unless the run names another driver
# (CI also runs the SQLite conformance half with QUEUECORE_SQLITE_DRIVER=pysqlite3).
os.environ.setdefault("QUEUECORE_SQLITE_DRIVER", "sqlite3")

_missing = pytest.StashKey[list[str]]()
_used = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> str:
    """Which SQLite the SQLite half runs on (QUEUECORE_SQLITE_DRIVER; sqlite3 unless set)."""
    from queuecore.backends.sqlite import pick_driver

    name, dbapi, _ = pick_driver(None)
    return f"queuecore SQLite driver: {name} (SQLite {dbapi.sqlite_version})"


def _no_postgres(config: pytest.Config, message: str) -> NoReturn:
    """Fails under QUEUECORE_REQUIRE_POSTGRES=1, else skips and remembers it for the banner."""
    if REQUIRE_POSTGRES:
        pytest.fail(message, pytrace=False)
    config.stash.setdefault(_missing, []).append(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A DSN of a reachable PostgreSQL server (its maintenance database)."""
    with find_or_start_postgres() as (dsn, problem):
        if dsn is None:
            _no_postgres(
                request.config,
                f"NO POSTGRESQL: the PostgreSQL half of the suite cannot run: {problem}",
            )
        engine = sa.create_engine(dsn)
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar()
        engine.dispose()
        shown = sa.make_url(dsn).render_as_string(hide_password=True)
        request.config.stash[_used] = f"PostgreSQL used: {shown} (server {version})"
        yield dsn


@pytest.fixture(scope="session")
def server_binaries(request: pytest.FixtureRequest) -> Path:
    """The folder of initdb and pg_ctl, for tests that run a cluster of their own."""
    found = find_server_binaries()
    if found is None:
        _no_postgres(
            request.config,
            "NO POSTGRESQL SERVER BINARIES: tests that start, restart or crash a cluster "
            "of their own cannot run (install the PostgreSQL server package)",
        )
    return found


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A skipped half of the suite must not pass unnoticed among the dots."""
    used = terminalreporter.config.stash.get(_used, None)
    if used is not None:
        terminalreporter.write_line(used)
    missing = terminalreporter.config.stash.get(_missing, [])
    if missing:
        terminalreporter.section("PostgreSQL did not run", sep="!", red=True, bold=True)
    for message in missing:
        terminalreporter.write_line(message, red=True, bold=True)


class ScratchDatabases:
    """Creates throw-away databases on the test server and drops them at the end."""

    def __init__(self, server_dsn: str) -> None:
        self._admin = sa.create_engine(server_dsn, isolation_level="AUTOCOMMIT")
        self._url = sa.make_url(server_dsn)
        self._names: list[str] = []

    def create(self) -> str:
        name = f"queuecore_test_{uuid.uuid4().hex[:12]}"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self._names.append(name)
        return self._url.set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self._admin.connect() as conn:
            for name in self._names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.dispose()


@pytest.fixture(scope="session")
def scratch_databases(postgres_server: str) -> Iterator[ScratchDatabases]:
    databases = ScratchDatabases(postgres_server)
    yield databases
    databases.drop_all()
