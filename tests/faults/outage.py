"""What the restart tests of every server backend share: a pool of `queuecore worker`
processes drains thousands of jobs while a fault breaks their connections, and then
every job must have ended right, every worker must have lived and gone on working, and
each outage must have been logged once (test_pg_restart.py and test_mariadb_restart.py
say which faults, on a server of their own)."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

import queuecore
from queuecore.demo.jobs import KINDS, ledger, payload
from queuecore.demo.pool import WorkerPool, worker_command
from queuecore.demo.verdict import outcomes
from queuecore.executors.reconnect import PAUSES
from queuecore.sql.schema import jobs
from tests.faults.helpers import wait_until

# Jobs that succeed; jobs that always raise. The fault comes when a third are finished, so
# a thousand are still to run through it and after: enough for every worker to be seen
# draining again (3,000 cost twice the time and showed nothing more).
ORDINARY, HOPELESS = 1500, 30
WORKERS, CONCURRENCY = 4, 2
LEASE_SECONDS = 2.0
# Longer than all the queue's own reconnect pauses together: the worker must outlast it.
LONG_OUTAGE = sum(PAUSES) + 2.5


class Server(Protocol):
    """A database server of a test module's own (PrivateCluster, PrivateMariaDB)."""

    def start(self) -> None: ...

    def stop(self, mode: Any = "fast") -> None: ...

    def restart(self, mode: Any = "fast") -> None: ...


def restart_fast(server: Server, _database: str) -> None:
    server.restart("fast")


def restart_immediate(server: Server, _database: str) -> None:
    """A crash: the server recovers from its log (WAL, redo) at the next start."""
    server.restart("immediate")


def long_outage(server: Server, _database: str) -> None:
    server.stop("immediate")
    time.sleep(LONG_OUTAGE)
    server.start()


def new_database(server: str) -> str:
    """A migrated database of its own on the private server at `server`, with the demo's
    ledger table."""
    name = f"restart_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {admin.dialect.identifier_preparer.quote(name)}")
    admin.dispose()
    dsn = sa.make_url(server).set(database=name).render_as_string(hide_password=False)
    queuecore.migrate(dsn)
    engine = sa.create_engine(dsn)
    ledger.create(engine)
    engine.dispose()
    return dsn


def enqueue_work(
    queue: queuecore.Queue, queue_name: str, ordinary: int = ORDINARY, hopeless: int = HOPELESS
) -> dict[int, str]:
    """Job id -> kind: jobs that succeed in a few milliseconds, and a few that always raise."""
    rules = {k.name: k for k in KINDS}
    rng = random.Random(0)
    kinds: dict[int, str] = {}
    for name, count in (("ordinary", ordinary), ("hopeless", hopeless)):
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


def drain_through_fault(
    database: str,
    queue: queuecore.Queue,
    fault: Callable[[], None],
    name: str,
    tmp_path: Path,
    back: Callable[[], bool] | None = None,
    *,
    workers: int = WORKERS,
    ordinary: int = ORDINARY,
    hopeless: int = HOPELESS,
) -> Counter[str]:
    """The scenario, with `fault` breaking the connections once a third of the jobs are
    done; `back`, if given, must come true afterwards (PostgreSQL: every worker LISTENs).
    Returns how many jobs ended in each state."""
    queue_name = f"restart-{name}"
    kinds = enqueue_work(queue, queue_name, ordinary, hopeless)
    total = len(kinds)
    log = tmp_path / "workers.log"
    with open(log, "ab") as out:
        pool = WorkerPool(
            worker_command(queue_name, CONCURRENCY, LEASE_SECONDS), workers, out, dsn=database
        )
        pool.start()
        try:
            wait_until(
                lambda: all_alive(pool, log) and unfinished(queue, queue_name) <= total * 2 // 3,
                "a third of the jobs are finished",
            )
            began = time.monotonic()
            fault()
            outage = time.monotonic() - began
            assert all_alive(pool, log)
            before = completions_by_pid(database, queue_name)
            wait_until(
                lambda: all_alive(pool, log) and unfinished(queue, queue_name) == 0,
                f"every job is finished after {name}",
            )
            if back is not None:
                wait_until(back, f"the workers are back after {name}")
            after = completions_by_pid(database, queue_name) - before
            pids = [proc.pid for proc in pool.procs]
        finally:
            stop_codes = pool.stop()

    context = f"{name}; worker log in {log}"
    assert stop_codes == [0] * workers and not pool.exits, (stop_codes, pool.exits, context)
    assert all(after[pid] > 0 for pid in pids), f"a worker stopped draining: {after} {context}"

    found = {row["id"]: row for row in outcomes(queue, queue_name)}
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
    assert blamed == [], (
        f"jobs whose handler succeeded were reported failed: {blamed[:3]} {context}"
    )

    repeated = repeated_outage_lines(log)
    assert repeated == [], f"an outage logged more than once: {repeated[:3]} {context}"
    states = Counter(row["state"] for row in found.values())
    print(  # shown with -s: what the scenario did
        f"{name}: {total} jobs, {states['done']} done, {states['dead']} dead, "
        f"{sum(r['ledger'] for r in found.values())} ledger rows, {workers} workers alive "
        f"throughout, fault took {outage:.1f}s"
    )
    return states
