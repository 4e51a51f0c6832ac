"""The conformance kit's harness for PostgreSQL (`queuecore.conformance.harness`): a
server found or started (`queuecore.conformance.postgresql_server`), one migrated
database for the session emptied before each test, and throw-away databases on demand,
all dropped at the end."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import ClassVar

import sqlalchemy as sa

import queuecore
from queuecore.conformance.harness import Harness, Unavailable
from queuecore.conformance.postgresql_server import find_or_start_postgres
from queuecore.schema import jobs


class PostgresHarness(Harness):
    name: ClassVar[str] = "postgresql"
    capabilities: ClassVar[frozenset[str]] = frozenset({"listen"})
    server_clock_sql: ClassVar[str | None] = "clock_timestamp()"

    def __init__(self) -> None:
        self._servers = ExitStack()
        self._admin: sa.Engine | None = None
        self._created: list[str] = []
        self._database: str | None = None
        self._said: str | None = None
        #: The server's DSN (its maintenance database), for tests that need one of their own.
        self.server = ""

    def start(self, scratch: Path) -> None:
        dsn, problem = self._servers.enter_context(find_or_start_postgres())
        if dsn is None:
            self._servers.close()
            raise Unavailable(problem or "no server")
        self.server = dsn
        self._admin = sa.create_engine(dsn, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar()
        shown = sa.make_url(dsn).render_as_string(hide_password=True)
        self._said = f"PostgreSQL used: {shown} (server {version})"
        self._database = self.create()
        queuecore.migrate(self._database)

    def create(self) -> str:
        """A new, empty database on the server (dropped at the end of the session)."""
        assert self._admin is not None, "start() first"
        name = f"queuecore_test_{uuid.uuid4().hex[:12]}"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self._created.append(name)
        return sa.make_url(self.server).set(database=name).render_as_string(hide_password=False)

    def fresh(self, scratch: Path) -> str:
        assert self._database is not None, "start() first"
        engine = sa.create_engine(self._database)
        with engine.begin() as conn:
            conn.execute(sa.text(f"TRUNCATE {jobs.name} RESTART IDENTITY"))
        engine.dispose()
        return self._database

    def unmigrated(self, scratch: Path) -> str:
        return self.create()

    def server_now(self, engine: sa.Engine) -> float:
        with engine.connect() as conn:
            now = conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
        return float(now)

    def unreachable(self, scratch: Path) -> str:
        return "postgresql+psycopg://postgres@127.0.0.1:1/queuecore"  # nothing listens on 1

    def stop(self) -> None:
        if self._admin is not None:
            with self._admin.connect() as conn:
                for name in self._created:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self._admin.dispose()
        self._servers.close()

    def describe(self) -> str | None:
        return self._said
