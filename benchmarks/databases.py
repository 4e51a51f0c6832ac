"""Where the benchmark's databases come from: fresh SQLite files and PostgreSQL
databases, seeded the same way for queuecore and its floor, and optionally a private
throw-away PostgreSQL server with stock settings."""

from __future__ import annotations

import contextlib
import getpass
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from alembic import command

from queuecore.migrate import alembic_config

#: The floors run on the first migration's table: the same indexes, none of the later
#: tuning, so what queuecore's own migrations buy shows in the ratio.
FLOOR_REVISION = "0001"

SEED_COLUMNS = (
    "kind, queue, payload, priority, state, attempts, max_attempts, visible_at, created_at"
)


def migrate(url: str, revision: str = "head") -> None:
    engine = sa.create_engine(url)
    try:
        command.upgrade(alembic_config(engine), revision)
    finally:
        engine.dispose()


#: Per dialect: a numbered row source for `i` in 1..:count, and the JSON builder.
NUMBERS = {
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) ",
        "n",
        "json_object",
    ),
    "postgresql": ("", "generate_series(1, :count) AS n(i)", "jsonb_build_object"),
}


def seed(url: str, queued: int, done: int = 0, *, analyze: bool = True) -> None:
    """`done` rows finished an hour ago, then `queued` jobs that became ready a second ago
    (so, as new work does, they sit behind whatever older entries the ready index holds),
    in one transaction; then ANALYZE, as autovacuum would long ago have done."""
    engine = sa.create_engine(url)
    prefix, source, json_object = NUMBERS[engine.dialect.name]
    an_hour_ago, just_now = time.time() - 3600, time.time() - 1
    with engine.begin() as conn:
        for state, count in (("done", done), ("queued", queued)):
            if count:
                conn.execute(
                    sa.text(
                        f"{prefix}INSERT INTO queuecore_jobs ({SEED_COLUMNS}, finished_at) "
                        f"SELECT 'noop', 'default', {json_object}('n', i), 0, :state, "
                        f":attempts, 5, :at, :at, :finished FROM {source}"
                    ),
                    {
                        "count": count,
                        "state": state,
                        "attempts": int(state == "done"),
                        "at": an_hour_ago if state == "done" else just_now,
                        "finished": an_hour_ago if state == "done" else None,
                    },
                )
        if analyze:
            conn.exec_driver_sql("ANALYZE queuecore_jobs")
    engine.dispose()


def use_wal(path: Path) -> None:
    """Switch a SQLite file to WAL before the workers open it, so they do not race to."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


class PostgresDatabases:
    """Creates databases on one server for the benchmark and drops them all at the end."""

    def __init__(self, server_url: str) -> None:
        self.server = sa.make_url(server_url)
        self._admin = sa.create_engine(self.server, isolation_level="AUTOCOMMIT")
        self._names: list[str] = []

    def create(self, label: str) -> str:
        name = f"qcbench_{label}_{uuid.uuid4().hex[:8]}"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self._names.append(name)
        return self.server.set(database=name).render_as_string(hide_password=False)

    def setting(self, name: str) -> str:
        with self._admin.connect() as conn:
            return str(conn.exec_driver_sql(f"SHOW {name}").scalar())

    def checkpoint(self) -> None:
        """Start each measurement with no dirty pages left over from the previous one."""
        with contextlib.suppress(sa.exc.DBAPIError), self._admin.connect() as conn:
            conn.exec_driver_sql("CHECKPOINT")

    def drop_all(self) -> None:
        with self._admin.connect() as conn:
            for name in self._names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.dispose()


def _server_binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """A throw-away PostgreSQL server with initdb's stock settings (autovacuum on), on a
    free loopback port, removed afterwards. As root it runs as the `postgres` user."""
    binaries = _server_binaries()
    if binaries is None:
        raise RuntimeError("no PostgreSQL server binaries (pg_ctl) found: pass --pg-dsn")
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
    folder = Path(tempfile.mkdtemp(prefix="qcbench-pg-"))
    if as_user:
        shutil.chown(folder, user="postgres")
    data = folder / "data"
    port = _free_port()
    user = "postgres" if as_user else getpass.getuser()

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, cwd=folder)

    run(str(binaries / "initdb"), "-D", str(data), "--auth=trust", "-U", user, "-E", "UTF8")
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    run(
        str(binaries / "pg_ctl"),
        "-D",
        str(data),
        "-o",
        options,
        "-w",
        "-l",
        str(folder / "log"),
        "start",
    )
    try:
        yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/postgres"
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
