"""Test-wide fixtures: where the PostgreSQL half of the suite gets its server.

`QUEUECORE_TEST_POSTGRES_DSN` names a server (any database on it; the suite makes its
own). Without it, `postgres_server` finds one it can start. When none can be had the
PostgreSQL tests are skipped with a loud warning, unless `QUEUECORE_REQUIRE_POSTGRES=1`
(CI sets it), which turns that into an error.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.pg_server import find_or_start_postgres

REQUIRE_POSTGRES = os.environ.get("QUEUECORE_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A DSN of a reachable PostgreSQL server (its maintenance database)."""
    with find_or_start_postgres() as (dsn, problem):
        if dsn is None:
            message = f"NO POSTGRESQL: the PostgreSQL half of the suite cannot run: {problem}"
            if REQUIRE_POSTGRES:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        yield dsn


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
