"""Connections of a `queuecore worker` on PostgreSQL (a new server allows 100): its
handler processes connect only for an effect, so a worker whose handlers return none
holds the supervisor's own (claimer, ack window, heartbeat, LISTEN) and no more,
whatever its concurrency."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from queuecore.demo.jobs import ledger
from queuecore.demo.pool import REGISTRY_SPEC
from tests.faults.outage import new_database
from tests.worker.processes import queuecore_process, wait_until

SLOTS = 4
SUPERVISOR_ROLES = 5  # claimer, ack window, heartbeat, LISTEN, the worker's record (R33)


def backends_of(conn: psycopg.Connection, database: str) -> int:
    """Client connections to `database` other than `conn` itself."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend'",
        (database,),
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_handler_processes_without_effects_open_no_connection(make_queue, dsn, tmp_path):
    queue = make_queue(clock=None)
    ids = [queue.enqueue("quick", {}).id for _ in range(200)]
    queue.close()  # only the worker's connections are left to count
    url = sa.make_url(dsn)
    log = tmp_path / "worker.log"
    command = ("worker", "tests.worker.handlers:REGISTRY", "--concurrency", str(SLOTS))
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with (
        psycopg.connect(libpq, autocommit=True) as conn,
        queuecore_process(*command, "--dsn", dsn, log=log) as worker,
    ):
        done = "SELECT count(*) FROM queuecore_jobs WHERE state = 'done'"
        wait_until(lambda: conn.execute(done).fetchone()[0] == len(ids), worker, log)
        # The handler processes ran every job, and none of them connected.
        assert backends_of(conn, url.database) <= SUPERVISOR_ROLES, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    # Read once the worker has exited: a job's line is logged after its completion
    # commits, so the table can say done before the log does.
    assert log.read_text().count("done in") == len(ids)


@pytest.fixture(scope="module")
def cluster(server_binaries: Path) -> Iterator[PrivateCluster]:
    """A server of the module's own: 68 connections at once would starve the shared one
    (100 by default) of the tests running beside this one."""
    with PrivateCluster(server_binaries) as running:
        yield running


@pytest.mark.postgresql_only
@pytest.mark.xdist_group("private-pg-connections")
@pytest.mark.parametrize("concurrency", [1, 64])
def test_a_busy_worker_holds_its_own_connections_and_one_per_slot(cluster, tmp_path, concurrency):
    """Busy handlers that commit an effect: each handler process opens one connection
    of its own for its completions, and keeps it, so a worker holds at most its
    supervisor's roles plus one per slot (the budget docs/how-to/many-hosts.md gives),
    counted all the while the jobs run. Handlers that raise too: the worker reports
    their failures from its slots' threads, which keep no connection each (107 at 64
    slots when they did)."""
    dsn = new_database(cluster.dsn)
    jobs = 2 * concurrency
    with queuecore.connect(dsn) as queue:
        queue.enqueue_many("ordinary", [{"work_s": 0.5}] * jobs)
        queue.enqueue_many("hopeless", [{}] * jobs, max_attempts=1)
    url = sa.make_url(dsn)
    log = tmp_path / "worker.log"
    command = ("worker", REGISTRY_SPEC, "--concurrency", str(concurrency))
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    counted: list[int] = []

    def all_done() -> bool:
        counted.append(backends_of(conn, url.database))
        done = conn.execute(f"SELECT count(*) FROM {ledger.name}").fetchone()
        dead = conn.execute("SELECT count(*) FROM queuecore_jobs WHERE state = 'dead'").fetchone()
        return done is not None and done[0] == jobs and dead is not None and dead[0] == jobs

    with (
        psycopg.connect(libpq, autocommit=True) as conn,
        queuecore_process(*command, "--dsn", dsn, log=log) as worker,
    ):
        wait_until(all_done, worker, log, timeout=120)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    assert max(counted) <= SUPERVISOR_ROLES + concurrency, (max(counted), log.read_text()[-2000:])
    print(f"connections of a worker at concurrency {concurrency}: at most {max(counted)}")
