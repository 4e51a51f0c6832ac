"""SQLite: one host, no set-up. Claims serialise on the database's write lock."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import URL, Engine, event, make_url
from sqlalchemy.dialects import sqlite

from queuecore.sqlqueue import SQLQueue

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


class SQLiteQueue(SQLQueue):
    """WAL mode; every write transaction starts with BEGIN IMMEDIATE, so it waits for the
    write lock up front (busy timeout) instead of failing with "database is locked" when
    it tries to upgrade a read lock halfway through."""

    migrates_on_connect = True
    _insert = staticmethod(sqlite.insert)

    @classmethod
    def create_engine(
        cls,
        bind: str | URL | Engine,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30.0,
        **options: Any,
    ) -> Engine:
        """`synchronous="NORMAL"` (the default) survives any application crash; only a
        power loss can take the last commits. `"FULL"` survives that too, several times slower."""
        url = bind.url if isinstance(bind, Engine) else make_url(bind)
        if url.database in (None, "", ":memory:"):
            raise ValueError(
                "an in-memory SQLite database cannot be shared by workers; "
                "name a file, e.g. sqlite:///jobs.db"
            )
        mode = str(synchronous).upper()
        if mode not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
        if not busy_timeout > 0:
            raise ValueError(
                f"busy_timeout must be a positive number of seconds, got {busy_timeout!r}"
            )
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout}, **options)

        @event.listens_for(engine, "connect")
        def _set_up(dbapi_connection: Any, _record: Any) -> None:
            # Take BEGIN away from the driver so the "begin" hook below decides it.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {mode}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            read_only = conn.get_execution_options().get("queuecore_read_only", False)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine
