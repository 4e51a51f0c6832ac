"""Test-wide fixtures beyond the conformance kit's (`queuecore.conformance.plugin`, run
here on the sqlite and postgresql harnesses, as pyproject.toml's `queuecore_backends`
says): the PostgreSQL server and throw-away databases for tests outside the kit.

`QUEUECORE_TEST_POSTGRES_DSN` names a server; without it the postgresql harness finds
one it can start (`queuecore.conformance.postgresql_server`). When none can be had the
PostgreSQL tests are skipped and the run ends with a banner saying so, unless
`QUEUECORE_REQUIRE_POSTGRES=1` (CI sets it), which turns that into an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import queuecore
from queuecore.conformance.harness import Harness
from queuecore.conformance.postgresql_server import find_server_binaries
from queuecore.conformance.session import Harnesses

# The stdlib's SQLite library, as the sqlite harness sets it (backends/sqlite_harness.py
# says why), for the tests that open queues before any harness started.
os.environ.setdefault("QUEUECORE_SQLITE_DRIVER", "sqlite3")


def pytest_report_header(config: pytest.Config) -> str:
    """Which SQLite the SQLite half runs on (QUEUECORE_SQLITE_DRIVER; sqlite3 unless set)."""
    from queuecore.backends.sqlite import pick_driver

    name, dbapi, _ = pick_driver(None)
    return f"queuecore SQLite driver: {name} (SQLite {dbapi.sqlite_version})"


@pytest.fixture
def private_dsn(harness: Harness, tmp_path: Path) -> str:
    """A migrated, empty database that no other test touches: one made for it, for a
    test that kills processes, terminates connections, adds tables of its own or alters
    the queue's, none of which may leak into another test."""
    url = harness.unmigrated(tmp_path)
    queuecore.migrate(url)
    return url


@pytest.fixture(scope="session")
def scratch_databases(harnesses: Harnesses) -> Any:
    """The postgresql harness: `create()` makes a throw-away database on its server."""
    return harnesses.started("postgresql")


@pytest.fixture(scope="session")
def postgres_server(scratch_databases: Any) -> str:
    """A DSN of the PostgreSQL server (its maintenance database)."""
    server: str = scratch_databases.server
    return server


@pytest.fixture(scope="session")
def server_binaries() -> Path:
    """The folder of initdb and pg_ctl, for tests that run a cluster of their own."""
    found = find_server_binaries()
    if found is None:
        message = (
            "NO POSTGRESQL SERVER BINARIES: tests that start, restart or crash a cluster "
            "of their own cannot run (install the PostgreSQL server package)"
        )
        if os.environ.get("QUEUECORE_REQUIRE_POSTGRES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found
