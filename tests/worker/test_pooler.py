"""R34: queuecore through PgBouncer in transaction mode (Debian's 1.18, which keeps no
prepared statement across transactions and drops LISTEN), with nothing but the pooler's
DSN and `?prepare_threshold=none`: `queuecore migrate`, a real `queuecore worker`
draining jobs (each writing a ledger row in its completion's transaction), and `wait()`.

Without the option, psycopg prepares the claim and the completion after their fifth
run, and the next transaction on another server connection fails (`prepared statement
"_pg3_0" already exists`): the worker test then sees jobs go undone or fail.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.pgbouncer import PgBouncer
from queuecore.conformance.postgresql_server import PrivateCluster, ServerUnavailable
from queuecore.demo.jobs import ledger
from queuecore.demo.pool import WorkerPool, worker_command
from queuecore.demo.verdict import outcomes
from tests.faults.helpers import wait_until
from tests.faults.outage import new_database, unfinished

# One pooler for the module: its tests run on one process of a parallel run.
pytestmark = [pytest.mark.postgresql_only, pytest.mark.xdist_group("pgbouncer")]

JOBS = 200
MANY_WORKERS, MANY_JOBS = 8, 80
LEASE_SECONDS = 5.0
NOT_HEARD = "did not reach its own LISTEN"


def pgbouncer(server: str, pool_size: int) -> PgBouncer:
    """PgBouncer in front of `server` (not started), or the test skipped without it."""
    try:
        return PgBouncer(server, pool_size=pool_size)
    except ServerUnavailable as exc:  # .ci/run fails a run that skipped PostgreSQL tests
        pytest.skip(f"NO PGBOUNCER: the PostgreSQL tests behind a pooler cannot run ({exc})")


@pytest.fixture(scope="module")
def bouncer(postgres_server: str) -> Iterator[PgBouncer]:
    # A pool smaller than the connections the test's clients open: transactions take turns
    # on server connections, as they do behind a production pooler.
    with pgbouncer(postgres_server, pool_size=4) as running:
        yield running


@pytest.fixture
def database(scratch_databases: Any) -> str:
    """A new database on the server, never migrated (its direct DSN)."""
    direct: str = scratch_databases.create()
    return direct


def pooled(bouncer: PgBouncer, direct: str) -> str:
    return bouncer.dsn(sa.make_url(direct).database)


def migrate_through(dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queuecore", "migrate"],
        env={"QUEUECORE_DSN": dsn, "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_r34_queuecore_migrate_runs_through_the_pooler_twice_at_once(
    bouncer: PgBouncer, database: str
) -> None:
    """The migration lock is a transaction's (a session's would be stranded on a server
    connection the pooler hands to others): two at once take turns, and both end."""
    dsn = pooled(bouncer, database)
    runs = [threading.Thread(target=lambda: results.append(migrate_through(dsn))) for _ in "ab"]
    results: list[subprocess.CompletedProcess[str]] = []
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    with queuecore.connect(dsn) as queue:
        assert queue.get(queue.enqueue("ping", {}).id) is not None


def test_r34_a_worker_drains_jobs_through_the_pooler_and_says_once_that_it_polls(
    bouncer: PgBouncer, database: str, tmp_path: Path
) -> None:
    queuecore.migrate(database)
    direct = sa.create_engine(database)
    ledger.create(direct)
    dsn = pooled(bouncer, database)
    with queuecore.connect(dsn) as queue:
        ids = queue.enqueue_many("ordinary", [{"work_s": 0.005}] * JOBS, queue="pooled")
        log = tmp_path / "worker.log"
        with open(log, "ab") as out:
            pool = WorkerPool(worker_command("pooled", 4, LEASE_SECONDS), 1, out, dsn=dsn)
            pool.start()
            try:
                wait_until(
                    lambda: pool.procs[0].poll() is None and unfinished(queue, "pooled") == 0,
                    f"every job is done through the pooler (log: {log})",
                )
            finally:
                codes = pool.stop()
    direct.dispose()
    with queuecore.connect(database) as queue:  # as the queue reports them (R08)
        found = {row["id"]: row for row in outcomes(queue, "pooled")}
    said = log.read_text()
    assert codes == [0], said[-3000:]
    assert found.keys() == set(ids)
    assert {(r["state"], r["attempts"], r["ledger"]) for r in found.values()} == {("done", 1, 1)}
    assert said.count(NOT_HEARD) == 1, said[-3000:]
    assert "prepared statement" not in said, said[-3000:]


def test_r34_wait_returns_the_result_through_the_pooler(bouncer: PgBouncer, database: str) -> None:
    """LISTEN is lost there: `wait()` polls, and still sees its job end."""
    queuecore.migrate(database)
    with queuecore.connect(pooled(bouncer, database)) as queue:
        job_id = queue.enqueue("add", {"a": 1}).id
        # More runs of each statement than psycopg's threshold for preparing one (5).
        for _ in range(8):
            queue.get(queue.enqueue("noise", {}).id)

        def finish() -> None:
            time.sleep(0.3)
            (job,) = queue.claim("pooled-waiter", kinds=["add"])
            assert job.id == job_id
            queue.complete(job, result={"sum": 2})

        helper = threading.Thread(target=finish)
        helper.start()
        snapshot = queue.wait(job_id, timeout=30)
        helper.join()
    assert snapshot is not None and snapshot.state == "done"
    assert snapshot.result == {"sum": 2}


def test_r34_a_prepare_threshold_that_is_no_count_is_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="prepare_threshold='sometimes'"):
        queuecore.connect("postgresql://app@127.0.0.1:1/app?prepare_threshold=sometimes")


def clients_of(port: int) -> int:
    """Established TCP connections to `port` on this machine (iproute2's ss)."""
    listed = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(listed.stdout.splitlines())


@pytest.mark.slow
def test_r34_more_workers_than_the_server_takes_connections_drain_through_the_pooler(
    server_binaries: Path, tmp_path: Path
) -> None:
    """A server of its own allowing 20 connections (17 for clients), PgBouncer with 8
    in front, and 8 workers whose effects give each up to 5 connections: up to 40
    clients, every job done once, no worker turned away (100 workers and a server of
    100 are the same sum, more than this machine can run beside the suite)."""
    with PrivateCluster(server_binaries, settings={"max_connections": "20"}) as server:
        database = new_database(server.dsn)
        with pgbouncer(server.dsn, pool_size=8) as pooler:
            dsn = pooled(pooler, database)
            peak = drain_with_workers(dsn, MANY_WORKERS, tmp_path / "workers.log", pooler.port)
            with queuecore.connect(database) as queue:  # as the queue reports them (R08)
                found = outcomes(queue, "many")
    assert {(r["state"], r["ledger"]) for r in found} == {("done", 1)}
    assert len(found) == MANY_JOBS
    assert peak > 20, "the workers never held more connections than the server allows"
    print(f"{MANY_WORKERS} workers held {peak} connections to the pooler; the server allows 20")


def drain_with_workers(dsn: str, workers: int, log: Path, port: int) -> int:
    """`workers` workers (concurrency 1) drain MANY_JOBS; the peak of their connections."""
    peak = 0
    with queuecore.connect(dsn) as queue, open(log, "ab") as out:
        queue.enqueue_many("ordinary", [{"work_s": 0.05}] * MANY_JOBS, queue="many")
        pool = WorkerPool(worker_command("many", 1, LEASE_SECONDS), workers, out, dsn=dsn)
        pool.start()
        try:

            def drained() -> bool:
                nonlocal peak
                peak = max(peak, clients_of(port))
                assert all(proc.poll() is None for proc in pool.procs), log.read_text()[-3000:]
                return unfinished(queue, "many") == 0

            wait_until(drained, "every job is done through the pooler")
        finally:
            codes = pool.stop()
    assert codes == [0] * workers, log.read_text()[-3000:]
    return peak
