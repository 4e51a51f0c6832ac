"""What the harnesses of database servers share (`queuecore.conformance.harness`): one
migrated database for the session, emptied before each test, and throw-away databases
on demand, all dropped at the end. A subclass finds its server in `start` and calls
`open_server`; it says how to empty the table (`empty_sql`) and what version it runs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import ClassVar

import sqlalchemy as sa

import queuecore
from queuecore.conformance.harness import Harness
from queuecore.migrate import VERSION_TABLE
from queuecore.sql.schema import jobs, workers

#: The name each throw-away database starts with (the rest is random).
PREFIX = "queuecore_test_"
#: The tables a migrated database holds: every other one is a test's own.
QUEUECORE_TABLES = frozenset({jobs.name, workers.name, VERSION_TABLE})


class ServerHarness(Harness):
    #: Empties the jobs table and starts its ids again at 1.
    empty_sql: ClassVar[str]
    #: Drops one database (`{name}`, quoted), even while connections to it are open.
    drop_sql: ClassVar[str] = "DROP DATABASE IF EXISTS {name}"
    #: Reads the server's version, for the run's header.
    version_sql: ClassVar[str] = "SELECT version()"
    #: Names the server in the run's header ("PostgreSQL").
    product: ClassVar[str]

    def __init__(self) -> None:
        self._admin: sa.Engine | None = None
        self._created: list[str] = []
        self._database: str | None = None
        self._said: str | None = None
        #: The server's DSN, for tests that need a database of their own.
        self.server = ""

    def open_server(self, dsn: str) -> None:
        """Use the server at `dsn` (any database on it): the session's database is made
        and migrated there."""
        self.server = dsn
        self._admin = sa.create_engine(dsn, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            version = conn.exec_driver_sql(self.version_sql).scalar()
        shown = sa.make_url(dsn).render_as_string(hide_password=True)
        self._said = f"{self.product} used: {shown} (server {version})"
        self._database = self.create()
        queuecore.migrate(self._database)

    def create(self) -> str:
        """A new, empty database on the server (dropped at the end of the session)."""
        assert self._admin is not None, "start() first"
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self._quoted(name)}")
        self._created.append(name)
        return sa.make_url(self.server).set(database=name).render_as_string(hide_password=False)

    def fresh(self, scratch: Path) -> str:
        """The session's database with no jobs, and without the tables an earlier test
        of this process left there (an application's ledger, say): ids start again at 1,
        so a row left keyed by an old job's id would be taken for the new job's."""
        assert self._database is not None, "start() first"
        engine = sa.create_engine(self._database)
        with engine.begin() as conn:
            conn.exec_driver_sql(self.empty_sql)
            conn.exec_driver_sql(f"DELETE FROM {workers.name}")
            for name in set(sa.inspect(conn).get_table_names()) - QUEUECORE_TABLES:
                conn.exec_driver_sql(f"DROP TABLE {self._quoted(name)}")
        engine.dispose()
        return self._database

    def unmigrated(self, scratch: Path) -> str:
        return self.create()

    def stop(self) -> None:
        if self._admin is not None:
            with self._admin.connect() as conn:
                for name in self._created:
                    conn.exec_driver_sql(self.drop_sql.format(name=self._quoted(name)))
            self._admin.dispose()

    def describe(self) -> str | None:
        return self._said

    def _quoted(self, name: str) -> str:
        assert self._admin is not None, "start() first"
        return self._admin.dialect.identifier_preparer.quote_identifier(name)
