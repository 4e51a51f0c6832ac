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

import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from queuecore.demo.jobs import KINDS, ledger, payload
from queuecore.demo.pool import WorkerPool, worker_command
from queuecore.demo.verdict import outcomes
from queuecore.reconnect import PAUSES
from queuecore.schema import jobs
from tests.faults.helpers import Terminator, scalar, wait_until

pytestmark = pytest.mark.postgresql_only

ORDINARY, HOPELESS = 3000, 30  # jobs that succeed; jobs that always raise
WORKERS, CONCURRENCY = 4, 2
LEASE_SECONDS = 2.0
# Longer than all the queue's own reconnect pauses together: the worker must outlast it.
LONG_OUTAGE = sum(PAUSES) + 2.5
TERMINATE_ROUNDS = 3
LISTEN = "LISTEN queuecore"  # the last statement a worker's listening connection ran

Fault = Callable[[PrivateCluster, str], None]
"""Breaks every connection to one database of the cluster."""


def restart_fast(cluster: PrivateCluster, _database: str) -> None:
    cluster.restart("fast")


def restart_immediate(cluster: PrivateCluster, _database: str) -> None:
    """A crash: no shutdown checkpoint, recovery from the WAL at the next start."""
    cluster.restart("immediate")


def long_outage(cluster: PrivateCluster, _database: str) -> None:
    cluster.stop("immediate")
    time.sleep(LONG_OUTAGE)
    cluster.start()


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
    """A migrated database of its own on the private cluster, with the demo's ledger."""
    name = f"restart_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(cluster.dsn, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    dsn = sa.make_url(cluster.dsn).set(database=name).render_as_string(hide_password=False)
    queuecore.migrate(dsn)
    engine = sa.create_engine(dsn)
    ledger.create(engine)
    engine.dispose()
    return dsn


@pytest.fixture
def queue(database: str) -> Iterator[queuecore.Queue]:
    with queuecore.connect(database) as opened:
        yield opened


def enqueue_work(queue: queuecore.Queue, queue_name: str) -> dict[int, str]:
    """Job id -> kind: jobs that succeed in a few milliseconds, and a few that always raise."""
    rules = {k.name: k for k in KINDS}
    rng = random.Random(0)
    kinds: dict[int, str] = {}
    for name, count in (("ordinary", ORDINARY), ("hopeless", HOPELESS)):
        ids = queue.enqueue_many(
            name,
            [payload(name, LEASE_SECONDS, rng) for _ in range(count)],
            queue=queue_name,
            max_attempts=rules[name].max_attempts,
        )
        kinds.update(dict.fromkeys(ids, name))
    return kinds


def unfinished(queue: queuecore.Queue, queue_name: str) -> int:
    stats = queue.stats(queue_name)
    return stats["queued"] + stats["running"]


def all_alive(pool: WorkerPool, log: Path) -> bool:
    ended = [proc.returncode for proc in pool.procs if proc.poll() is not None]
    assert not ended, f"worker(s) exited with {ended}; their log:\n{log.read_text()[-4000:]}"
    return True


def completions_by_pid(dsn: str, queue_name: str) -> Counter[int]:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            pids = conn.execute(sa.select(ledger.c.pid).where(ledger.c.queue == queue_name))
            return Counter(pids.scalars())
    finally:
        engine.dispose()


# In a worker's log: the line that says a connection is lost -> the one that says it is back.
OUTAGE_LINES = {"database connection lost": "database connection back", "LISTEN": "listening"}


def repeated_outage_lines(log: Path) -> list[str]:
    """Lines about a lost connection that its process had already said was lost and not
    yet said was back, or that no outage line accounts for: an outage is to be logged
    once, however many retries and threads meet it (the CLI logs `name[pid]: message`)."""
    lost: set[tuple[str, str]] = set()
    repeated = []
    for line in log.read_text().splitlines():
        match = re.search(r" (INFO|WARNING|ERROR) \S+\[(\d+)\]: (.*)", line)
        if not match:
            continue
        level, pid, text = match.groups()
        accounted = False
        for start, end in OUTAGE_LINES.items():
            if end in text:
                lost.discard((pid, start))
                accounted = True
            elif start in text:
                if (pid, start) in lost:
                    repeated.append(line)
                lost.add((pid, start))
                accounted = True
        if not accounted and level != "INFO" and "connection" in text:
            repeated.append(line)
    return repeated


@pytest.mark.parametrize(
    "fault", [restart_fast, restart_immediate, long_outage, terminate_backends]
)
def test_workers_outlast_the_fault_and_every_job_ends_right(
    cluster: PrivateCluster, database: str, queue: queuecore.Queue, fault: Fault, tmp_path: Path
) -> None:
    queue_name = f"restart-{fault.__name__}"
    kinds = enqueue_work(queue, queue_name)
    total = len(kinds)
    log = tmp_path / "workers.log"
    with open(log, "ab") as out:
        pool = WorkerPool(
            worker_command(queue_name, CONCURRENCY, LEASE_SECONDS), WORKERS, out, dsn=database
        )
        pool.start()
        try:
            wait_until(
                lambda: all_alive(pool, log) and unfinished(queue, queue_name) <= total * 2 // 3,
                "a third of the jobs are finished",
            )
            began = time.monotonic()
            fault(cluster, sa.make_url(database).database)
            outage = time.monotonic() - began
            assert all_alive(pool, log)
            before = completions_by_pid(database, queue_name)
            wait_until(
                lambda: all_alive(pool, log) and unfinished(queue, queue_name) == 0,
                f"every job is finished after {fault.__name__}",
            )
            wait_until(
                lambda: (
                    scalar(
                        database,
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND query = :listen",
                        listen=LISTEN,
                    )
                    == WORKERS
                ),
                "every worker LISTENs again",
            )
            after = completions_by_pid(database, queue_name) - before
            pids = [proc.pid for proc in pool.procs]
        finally:
            stop_codes = pool.stop()

    context = f"{fault.__name__}; worker log in {log}"
    assert stop_codes == [0] * WORKERS and not pool.exits, (stop_codes, pool.exits, context)
    assert all(after[pid] > 0 for pid in pids), f"a worker stopped draining: {after} {context}"

    found = {row["id"]: row for row in outcomes(queue.engine, queue_name)}
    assert found.keys() == kinds.keys(), f"jobs lost: {context}"
    rules = {k.name: k for k in KINDS}
    wrong = [
        (job_id, row["kind"], row["state"], row["attempts"], row["ledger"])
        for job_id, row in found.items()
        if not rules[kinds[job_id]].ended_right(row["state"], row["attempts"], row["ledger"])
    ]
    assert wrong == [], f"(id, kind, state, attempts, ledger rows); {context}"
    with queue.engine.connect() as conn:
        blamed = conn.execute(
            sa.select(jobs.c.id, jobs.c.last_error).where(
                jobs.c.queue == queue_name,
                jobs.c.kind == "ordinary",
                jobs.c.last_error.is_not(None),
            )
        ).all()
    assert blamed == [], f"jobs whose handler succeeded were reported failed: {context}"

    repeated = repeated_outage_lines(log)
    assert repeated == [], f"an outage logged more than once: {context}"
    states = Counter(row["state"] for row in found.values())
    print(  # shown with -s: what the scenario did
        f"{fault.__name__}: {total} jobs, {states['done']} done, {states['dead']} dead, "
        f"{sum(r['ledger'] for r in found.values())} ledger rows, {WORKERS} workers alive "
        f"throughout, fault took {outage:.1f}s"
    )
