"""Running and watching the other processes of a fault test."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
PATIENCE = 60.0  # a bound on waiting for another process, never a pass/fail criterion


def actor(*arguments: str) -> subprocess.Popen[str]:
    """Starts `python -m tests.faults.actors ARGUMENTS` with pipes to talk to it."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.actors", *arguments],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_message(process: subprocess.Popen[str]) -> Any:
    """The next JSON line the process prints; fails with its stderr if it dies first."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=PATIENCE):
            process.kill()
            raise AssertionError(f"no message from {process.args} in {PATIENCE}s")
    line = process.stdout.readline()
    if not line:
        process.wait()
        raise AssertionError(f"{process.args} exited {process.returncode}: {process.stderr.read()}")
    return json.loads(line)


def run_actor(*arguments: str) -> Any:
    process = actor(*arguments)
    message = read_message(process)
    assert process.wait(timeout=PATIENCE) == 0, process.stderr.read()
    return message


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {PATIENCE}s waiting until {what}")
        time.sleep(0.05)


def scalar(dsn: str, sql: str, **params: Any) -> Any:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()
    finally:
        engine.dispose()


def rows(dsn: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.text(sql), params)]
    finally:
        engine.dispose()


class Terminator:
    """Ends server backends of one database, all at the same instant, and waits until
    each has really gone."""

    def __init__(self, server_dsn: str, database: str) -> None:
        self.admin = sa.create_engine(server_dsn, isolation_level="AUTOCOMMIT")
        self.database = database

    def _end(self, where: str, **params: object) -> int:
        with self.admin.connect() as conn:
            # In the select list, never in WHERE: the planner may run WHERE terms in any
            # order, and would end backends that the other terms were there to spare.
            signalled = conn.execute(
                sa.text(
                    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = :database AND pid <> pg_backend_pid() AND {where}"
                ),
                {"database": self.database, **params},
            ).all()
            ended = [pid for pid, terminated in signalled if terminated]
            gone = sa.text("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = ANY(:pids)")
            deadline = time.monotonic() + PATIENCE
            while not conn.execute(gone, {"pids": ended}).scalar():
                assert time.monotonic() < deadline, f"backends {ended} outlived SIGTERM"
                time.sleep(0.01)
        return len(ended)

    def every_connection(self) -> int:
        return self._end("true")

    def backend(self, pid: int) -> int:
        return self._end("pid = :pid", pid=pid)
