"""The conformance kit's harness for SQLite (`queuecore.conformance.harness`): a file per
test, copied from one migrated for the session (cheaper than migrating each time)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

import queuecore
from queuecore.conformance.harness import PRIMARY_KEY, Harness, Plan
from queuecore.sql.schema import jobs

from .sqlite import pick_driver


class SQLiteHarness(Harness):
    name: ClassVar[str] = "sqlite"
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"migrates_on_connect", "shared_chain", "single_writer"}
    )

    def __init__(self) -> None:
        self._template: Path | None = None

    def start(self, scratch: Path) -> None:
        # The suite reads and writes its files behind the queue's back with plain engines
        # and sqlite3 connections, on the stdlib's SQLite library; two libraries on one
        # file in one process do not see each other's locks (sqlite.org/howtocorrupt.html,
        # 2.2.1), so the queue runs on the stdlib's too unless the run names another.
        os.environ.setdefault("QUEUECORE_SQLITE_DRIVER", "sqlite3")
        self._template = scratch / "jobs.db"
        queuecore.migrate(f"sqlite:///{self._template}")

    def fresh(self, scratch: Path) -> str:
        assert self._template is not None, "start() first"
        path = scratch / "jobs.db"
        shutil.copyfile(self._template, path)
        return f"sqlite:///{path}"

    def unmigrated(self, scratch: Path) -> str:
        return f"sqlite:///{scratch / 'never-migrated.db'}"

    def unreachable(self, scratch: Path) -> str:
        return f"sqlite:///{scratch / 'no-such-folder' / 'jobs.db'}"

    def explain(self, conn: sa.Connection, sql: str, parameters: Any) -> Plan:
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters).all()
        details = [row.detail for row in rows]
        indexes = {
            PRIMARY_KEY if found == "INTEGER PRIMARY KEY" else found.split()[-1]
            for detail in details
            for found in re.findall(r"USING (INTEGER PRIMARY KEY|(?:COVERING )?INDEX \w+)", detail)
        }
        return Plan(
            indexes=frozenset(indexes),
            full_scan=any(re.fullmatch(rf"SCAN {jobs.name}", d) for d in details),
            sorts=any("TEMP B-TREE FOR ORDER BY" in d for d in details),
        )

    def engine(self, dsn: str) -> sa.Engine:
        """On the queue's own SQLite library: one library per file and process."""
        return sa.create_engine(dsn, module=pick_driver(None)[1])
