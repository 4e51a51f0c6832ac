"""PostgreSQL goes away under load: worker processes, started through the command line,
drain thousands of jobs while their server restarts (a fast and a crash-like immediate
stop), stays down longer than the queue's own reconnect pauses (so the worker's back-off
must carry it), or has every backend of their database terminated.

Afterwards, read from the database and the processes: every worker is still alive,
each went on completing jobs after the fault, and each LISTENs again; no job is lost;
every job that can succeed is done with exactly one ledger row (its completion's
effect) and was never reported failed (the outage is not the job's fault); every job
that always raises is dead after exactly its max attempts; and each worker logged the
outage once, not once per retry. No timing is asserted except generous deadlines.

The server is a `PrivateCluster` of this module's own: the one the rest of the suite,
and anybody else on this machine, uses is never restarted or touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from tests.faults.helpers import Terminator, scalar
from tests.faults.outage import (
    WORKERS,
    drain_through_fault,
    long_outage,
    new_database,
    restart_fast,
    restart_immediate,
)

# One private cluster for the module: its tests run on one process of a parallel run.
pytestmark = [pytest.mark.postgresql_only, pytest.mark.xdist_group("private-pg"), pytest.mark.slow]

TERMINATE_ROUNDS = 3
LISTEN = "LISTEN queuecore%"  # the last statement a worker's listening connection ran

Fault = Callable[[PrivateCluster, str], None]
"""Breaks every connection to one database of the cluster."""


def terminate_backends(cluster: PrivateCluster, database: str) -> None:
    """Every connection to the database, a few times over: the server stays up."""
    terminator = Terminator(cluster.dsn, database)
    try:
        for round_ in range(TERMINATE_ROUNDS):
            if round_:
                time.sleep(0.5)
            # At least the listeners, which hold their connections for good.
            assert terminator.every_connection() >= WORKERS
    finally:
        terminator.admin.dispose()


@pytest.fixture(scope="module")
def cluster(server_binaries: Path) -> Iterator[PrivateCluster]:
    with PrivateCluster(server_binaries) as running:
        yield running


@pytest.fixture
def database(cluster: PrivateCluster) -> str:
    return new_database(cluster.dsn)


@pytest.fixture
def queue(database: str) -> Iterator[queuecore.Queue]:
    with queuecore.connect(database) as opened:
        yield opened


@pytest.mark.parametrize(
    "fault", [restart_fast, restart_immediate, long_outage, terminate_backends]
)
def test_workers_outlast_the_fault_and_every_job_ends_right(
    cluster: PrivateCluster, database: str, queue: queuecore.Queue, fault: Fault, tmp_path: Path
) -> None:
    def listening() -> bool:
        count = scalar(
            database,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE :listen",
            listen=LISTEN,
        )
        return bool(count == WORKERS)

    def broken() -> None:
        fault(cluster, sa.make_url(database).database)

    drain_through_fault(database, queue, broken, fault.__name__, tmp_path, back=listening)
