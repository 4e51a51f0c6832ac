"""Throughput: N worker processes start together (a barrier) and drain the same number
of queued no-op jobs; jobs per second from the barrier to the last worker's end.

Each run starts from a freshly seeded queue, and checks that every job ran exactly once.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import databases
from benchmarks.implementations import (
    FLOOR,
    FLOOR_ONE_STATEMENT,
    HUEY,
    PGQUEUER,
    Target,
    huey_app,
    worker,
)

FLOORS = (FLOOR, FLOOR_ONE_STATEMENT)

#: Generous bounds so a stuck run fails instead of hanging the benchmark.
START_TIMEOUT_S = 300
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Run:
    """One measured drain."""

    jobs_per_s: float
    seconds: float
    peak_rss_mb: float
    exactly_once: bool


class Databases:
    """Fresh seeded queues for each implementation, on a scratch folder (SQLite) and on
    scratch databases (PostgreSQL)."""

    def __init__(self, folder: Path, postgres: databases.PostgresDatabases | None) -> None:
        self.folder = folder
        self.postgres = postgres
        self._templates: dict[str, Path] = {}
        self._pg: dict[str, str] = {}
        self._runs = 0

    def _sqlite_template(self, revision: str) -> Path:
        if revision not in self._templates:
            path = self.folder / f"template-{revision}.db"
            databases.migrate(f"sqlite:///{path}", revision)
            self._templates[revision] = path
        return self._templates[revision]

    def _pg_database(self, implementation: str) -> str:
        assert self.postgres is not None
        if implementation not in self._pg:
            label = implementation.split()[0]
            url = self.postgres.create(label)
            if implementation == PGQUEUER:
                asyncio.run(_pgqueuer_install(Target("postgresql", url).libpq_dsn))
            else:
                revision = databases.FLOOR_REVISION if implementation in FLOORS else "head"
                databases.migrate(url, revision)
            self._pg[implementation] = url
        return self._pg[implementation]

    def prepare(self, implementation: str, backend: str, synchronous: str, jobs: int) -> Target:
        """A queue holding `jobs` ready no-op jobs and nothing else."""
        self._runs += 1
        if backend == "sqlite":
            path = self.folder / f"run-{self._runs}.db"
            if implementation == HUEY:
                huey, noop = huey_app(str(path), "OFF")
                for n in range(jobs):
                    noop(n)
                huey.storage.close()
            else:
                revision = databases.FLOOR_REVISION if implementation in FLOORS else "head"
                shutil.copyfile(self._sqlite_template(revision), path)
                databases.seed(f"sqlite:///{path}", queued=jobs)
                databases.use_wal(path)
            return Target("sqlite", str(path), synchronous)
        url = self._pg_database(implementation)
        target = Target("postgresql", url)
        if implementation == PGQUEUER:
            asyncio.run(_pgqueuer_seed(target.libpq_dsn, jobs))
        else:
            _truncate(url, "queuecore_jobs")
            databases.seed(url, queued=jobs)
        assert self.postgres is not None
        self.postgres.checkpoint()
        return target

    def prepare_unanalyzed(self, jobs: int) -> Target:
        """A new PostgreSQL database whose queue receives `jobs` at once and has never been
        analyzed: an application's first burst. Autovacuum is off for the table, so what
        the run measures is queuecore's own answer to the stale plan (its claim's look,
        `queuecore.core.statistics`), not when autovacuum's next round happens to fall."""
        assert self.postgres is not None
        url = self.postgres.create("unanalyzed")
        databases.migrate(url, "head")
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql("ALTER TABLE queuecore_jobs SET (autovacuum_enabled = false)")
        engine.dispose()
        databases.seed(url, queued=jobs, analyze=False)
        self.postgres.checkpoint()
        return Target("postgresql", url)

    def discard(self, target: Target) -> None:
        if target.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(target.location + suffix).unlink(missing_ok=True)


def _truncate(url: str, *tables: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")
    engine.dispose()


async def _pgqueuer_install(dsn: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    await Queries(AsyncpgDriver(conn)).install()
    await conn.close()


async def _pgqueuer_seed(dsn: str, jobs: int) -> None:
    """An empty queue, log and statistics, then `jobs` no-op jobs in one batch."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    tables = await conn.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename LIKE 'pgqueuer%'"
    )
    await conn.execute(f"TRUNCATE {', '.join(t['tablename'] for t in tables)} RESTART IDENTITY")
    if jobs:
        await Queries(AsyncpgDriver(conn)).enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
    await conn.close()


def measure(implementation: str, target: Target, workers: int, limit: int, jobs: int) -> Run:
    """Start `workers` processes, open the barrier, and time the drain."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers + 1, timeout=START_TIMEOUT_S)
    pipes: list[Any] = []
    processes = []
    for i in range(workers):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=worker, args=(implementation, target, limit, f"w{i}", barrier, sender)
        )
        process.start()
        sender.close()
        pipes.append(receiver)
        processes.append(process)
    try:
        barrier.wait()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        reports = []
        for receiver in pipes:
            if not receiver.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{implementation}: a worker did not finish in time")
            reports.append(receiver.recv())
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    errors = [r for r in reports if isinstance(r, str)]
    if errors:
        raise RuntimeError("; ".join(errors))
    ran = [job for ids, _, _, _ in reports for job in ids]
    start = min(r[1] for r in reports)
    seconds = max(r[2] for r in reports) - start
    return Run(
        jobs_per_s=len(ran) / seconds,
        seconds=seconds,
        peak_rss_mb=max(r[3] for r in reports) / 1024,
        exactly_once=len(ran) == jobs and len(set(ran)) == jobs,
    )
