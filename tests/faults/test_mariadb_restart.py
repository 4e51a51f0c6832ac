"""MariaDB goes away under load, as PostgreSQL does in test_pg_restart.py: worker
processes drain thousands of jobs while their server restarts (SIGTERM, and a SIGKILL
that InnoDB recovers from), stays down longer than the queue's own reconnect pauses, or
has every connection to their database killed (`KILL CONNECTION`). The checks are
`tests.faults.outage`'s; MariaDB has no LISTEN to come back to.

The server is a `PrivateMariaDB` of this module's own: the machine's is never touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from tests.faults.helpers import PATIENCE
from tests.faults.mariadb_server import PrivateMariaDB
from tests.faults.outage import (
    WORKERS,
    drain_through_fault,
    long_outage,
    new_database,
    restart_fast,
    restart_immediate,
)

# One private server for the module: its tests run on one process of a parallel run.
pytestmark = [
    pytest.mark.mariadb_only,
    pytest.mark.parametrize("backend", ["mariadb"]),
    pytest.mark.xdist_group("private-mariadb"),
    pytest.mark.slow,
]

KILL_ROUNDS = 3

Fault = Callable[[PrivateMariaDB, str], None]


def kill_every_session(server: PrivateMariaDB, database: str) -> None:
    """Every connection to the database, a few times over: the server stays up. Rounds go
    on until at least as many sessions as workers were killed, all rounds together: a
    worker's slots connect per report, so one instant may find fewer sessions than
    workers on a loaded machine, and a fault that killed none would test nothing."""
    admin = sa.create_engine(server.dsn, isolation_level="AUTOCOMMIT")
    killed, rounds = 0, 0
    deadline = time.monotonic() + PATIENCE
    try:
        while rounds < KILL_ROUNDS or killed < WORKERS:
            assert time.monotonic() < deadline, f"{killed} session(s) killed in {rounds} rounds"
            if rounds:
                time.sleep(0.5)
            killed += kill_sessions(admin, database)
            rounds += 1
    finally:
        admin.dispose()


def kill_sessions(admin: sa.Engine, database: str) -> int:
    """One round: every session on `database` but this one is killed; how many were."""
    killed = 0
    with admin.connect() as conn:
        ids = conn.execute(
            sa.text(
                "SELECT id FROM information_schema.PROCESSLIST "
                "WHERE db = :db AND id <> CONNECTION_ID()"
            ),
            {"db": database},
        ).scalars()
        for connection_id in list(ids):
            try:
                conn.exec_driver_sql(f"KILL CONNECTION {int(connection_id)}")
                killed += 1
            except sa.exc.DBAPIError:  # it ended on its own meanwhile
                pass
    return killed


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateMariaDB]:
    with PrivateMariaDB() as running:
        yield running


@pytest.fixture
def database(server: PrivateMariaDB) -> str:
    return new_database(server.dsn)


@pytest.fixture
def queue(database: str) -> Iterator[queuecore.Queue]:
    with queuecore.connect(database) as opened:
        yield opened


@pytest.mark.parametrize(
    "fault", [restart_fast, restart_immediate, long_outage, kill_every_session]
)
def test_workers_outlast_the_fault_and_every_job_ends_right(
    backend: str,  # only where the run has the mariadb harness
    server: PrivateMariaDB,
    database: str,
    queue: queuecore.Queue,
    fault: Fault,
    tmp_path: Path,
) -> None:
    def broken() -> None:
        fault(server, sa.make_url(database).database or "")

    drain_through_fault(database, queue, broken, fault.__name__, tmp_path)
