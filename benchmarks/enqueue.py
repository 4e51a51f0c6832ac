"""Enqueue: what a web request pays to record a job (`enqueue`, one job, its own
transaction), and what a bulk import pays (`enqueue_many` of many jobs at once), beside
a raw-driver floor and the peers' own insert paths, on an empty queue.

The floor writes what queuecore's enqueue writes (the same columns, the dedupe key's
ON CONFLICT, the new id returned) and, on PostgreSQL, wakes idle workers with the same
NOTIFY queuecore sends by default, all in one autocommit statement. Each run happens in
the benchmark's own process after a warm-up; jobs per second over the timed calls.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.checks import Check, check, fmt, ratio
from benchmarks.implementations import (
    FLOOR,
    HUEY,
    PGQUEUER,
    QUEUECORE,
    QUEUECORE_ASYNC,
    TASKS,
    Target,
    connect_queuecore_async,
)

SINGLE = "enqueue"
MANY = "enqueue_many"
WARM_UP = 50

COLUMNS = "kind, queue, payload, priority, state, attempts, max_attempts, visible_at, created_at"


def _payload(n: int) -> dict[str, int]:
    return {"n": n}


def measure(implementation: str, target: Target, shape: str, jobs: int) -> float | None:
    """Jobs per second of `jobs` enqueues of one shape; None where the implementation has
    no such path (huey has no batch enqueue)."""
    runner = RUNNERS[implementation]
    return runner(target, shape, jobs)


def _timed(one: Callable[[int], Any], batch: Callable[[int, int], Any], shape: str, jobs: int):
    """Warm up (prepared statements, caches), then time `jobs` jobs one by one or as one batch."""
    if shape == SINGLE:
        for n in range(WARM_UP):
            one(-1 - n)
        start = time.perf_counter()
        for n in range(jobs):
            one(n)
        return jobs / (time.perf_counter() - start)
    batch(-WARM_UP, WARM_UP)
    start = time.perf_counter()
    batch(0, jobs)
    return jobs / (time.perf_counter() - start)


def _queuecore(target: Target, shape: str, jobs: int) -> float:
    from benchmarks.implementations import _connect_queuecore

    with _connect_queuecore(target) as queue:
        return _timed(
            lambda n: queue.enqueue("noop", _payload(n)),
            lambda first, count: queue.enqueue_many(
                "noop", [_payload(n) for n in range(first, first + count)]
            ),
            shape,
            jobs,
        )


def _queuecore_async(target: Target, shape: str, jobs: int) -> float:
    """`connect_async`: single enqueues from TASKS concurrent tasks (a web server's
    requests), or one awaited enqueue_many."""

    async def run() -> float:
        async with await connect_queuecore_async(target) as queue:

            async def tasks(first: int, count: int) -> None:
                async def one_task(numbers: range) -> None:
                    for n in numbers:
                        await queue.enqueue("noop", _payload(n))

                await asyncio.gather(
                    *(one_task(range(first + t, first + count, TASKS)) for t in range(TASKS))
                )

            async def batch(first: int, count: int) -> None:
                await queue.enqueue_many("noop", [_payload(n) for n in range(first, first + count)])

            timed = tasks if shape == SINGLE else batch
            await timed(-WARM_UP, WARM_UP)
            start = time.perf_counter()
            await timed(0, jobs)
            return jobs / (time.perf_counter() - start)

    return asyncio.run(run())


def _floor(target: Target, shape: str, jobs: int) -> float:
    if target.backend == "sqlite":
        return _sqlite_floor(target, shape, jobs)
    return _postgres_floor(target, shape, jobs)


def _sqlite_floor(target: Target, shape: str, jobs: int) -> float:
    conn = sqlite3.connect(target.location, isolation_level=None, timeout=30)
    conn.execute(f"PRAGMA synchronous = {target.synchronous}")
    one_sql = (
        f"INSERT INTO queuecore_jobs ({COLUMNS}, dedupe_key) "
        "VALUES ('noop', 'default', ?, 0, 'queued', 0, 5, ?, ?, NULL) "
        "ON CONFLICT (dedupe_key) DO NOTHING RETURNING id"
    )
    #: rows per multi-row INSERT: 3 parameters each, far below SQLite's variable limit.
    chunk = 500

    def one(n: int) -> int:
        now = time.time()
        return conn.execute(one_sql, (json.dumps(_payload(n)), now, now)).fetchone()[0]

    def batch(first: int, count: int) -> list[int]:
        now = time.time()
        ids: list[int] = []
        conn.execute("BEGIN IMMEDIATE")
        for start in range(first, first + count, chunk):
            numbers = range(start, min(start + chunk, first + count))
            values = ", ".join("('noop', 'default', ?, 0, 'queued', 0, 5, ?, ?)" for _ in numbers)
            params = [p for n in numbers for p in (json.dumps(_payload(n)), now, now)]
            sql = f"INSERT INTO queuecore_jobs ({COLUMNS}) VALUES {values} RETURNING id"
            ids += sorted(row[0] for row in conn.execute(sql, params))
        conn.execute("COMMIT")
        return ids

    try:
        return _timed(one, batch, shape, jobs)
    finally:
        conn.close()


def _postgres_floor(target: Target, shape: str, jobs: int) -> float:
    import psycopg
    from psycopg.types.json import Jsonb

    now = "extract(epoch FROM clock_timestamp())::float8"
    conn = psycopg.connect(target.libpq_dsn, autocommit=True)
    one_sql = (
        f"WITH job AS (INSERT INTO queuecore_jobs ({COLUMNS}, dedupe_key) "
        f"VALUES ('noop', 'default', %s, 0, 'queued', 0, 5, {now}, {now}, NULL) "
        "ON CONFLICT (dedupe_key) DO NOTHING RETURNING id) "
        "SELECT id, pg_notify('queuecore', 'default') FROM job"
    )
    many_sql = (
        f"WITH jobs AS (INSERT INTO queuecore_jobs ({COLUMNS}) "
        f"SELECT 'noop', 'default', p, 0, 'queued', 0, 5, {now}, {now} "
        "FROM unnest(%s::jsonb[]) WITH ORDINALITY AS t(p, i) ORDER BY i RETURNING id), "
        "woken AS (SELECT pg_notify('queuecore', 'default')) "
        "SELECT id FROM jobs, woken ORDER BY id"
    )

    def one(n: int) -> int:
        return conn.execute(one_sql, (Jsonb(_payload(n)),)).fetchone()[0]

    def batch(first: int, count: int) -> list[int]:
        payloads = [Jsonb(_payload(n)) for n in range(first, first + count)]
        return [row[0] for row in conn.execute(many_sql, (payloads,))]

    try:
        return _timed(one, batch, shape, jobs)
    finally:
        conn.close()


def _huey(target: Target, shape: str, jobs: int) -> float | None:
    """huey's enqueue: calling a task writes one row (`INSERT` in autocommit)."""
    if shape != SINGLE:
        return None
    from benchmarks.implementations import huey_app

    huey, noop = huey_app(target.location, target.synchronous)
    try:
        return _timed(noop, lambda first, count: None, shape, jobs)
    finally:
        huey.storage.close()


def _pgqueuer(target: Target, shape: str, jobs: int) -> float:
    """pgqueuer's `Queries.enqueue`: one job per call, or every job in one call."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    async def run() -> float:
        conn = await asyncpg.connect(target.libpq_dsn)
        queries = Queries(AsyncpgDriver(conn))
        try:
            if shape == SINGLE:
                for _ in range(WARM_UP):
                    await queries.enqueue("noop", None)
                start = time.perf_counter()
                for _ in range(jobs):
                    await queries.enqueue("noop", None)
                return jobs / (time.perf_counter() - start)
            await queries.enqueue(["noop"] * WARM_UP, [None] * WARM_UP, [0] * WARM_UP)
            start = time.perf_counter()
            await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
            return jobs / (time.perf_counter() - start)
        finally:
            await conn.close()

    return asyncio.run(run())


RUNNERS: dict[str, Callable[[Target, str, int], float | None]] = {
    QUEUECORE: _queuecore,
    QUEUECORE_ASYNC: _queuecore_async,
    FLOOR: _floor,
    HUEY: _huey,
    PGQUEUER: _pgqueuer,
}


@dataclass
class Row:
    backend: str
    shape: str
    jobs: int
    runs: dict[str, list[float]] = field(default_factory=dict)

    def median(self, implementation: str) -> float | None:
        runs = self.runs.get(implementation)
        return statistics.median(runs) if runs else None


PEERS = {"sqlite": HUEY, "postgresql": PGQUEUER}


def run(
    dbs: Any,
    backends: list[str],
    single_jobs: int,
    many_jobs: int,
    repeats: int,
    installed: Callable[[str], bool],
    log: Callable[[str], None],
) -> list[Row]:
    rows = [
        Row(backend, shape, jobs)
        for backend in backends
        for shape, jobs in ((SINGLE, single_jobs), (MANY, many_jobs))
    ]
    for repeat in range(repeats):
        for row in rows:
            chosen = [QUEUECORE, QUEUECORE_ASYNC, FLOOR]
            if installed(PEERS[row.backend]):
                chosen.append(PEERS[row.backend])
            for implementation in chosen:
                target = dbs.prepare(implementation, row.backend, "NORMAL", 0)
                rate = measure(implementation, target, row.shape, row.jobs)
                dbs.discard(target)
                if rate is None:
                    continue
                row.runs.setdefault(implementation, []).append(rate)
                log(
                    f"[{repeat + 1}/{repeats}] {row.shape} {row.backend} x{row.jobs} "
                    f"{implementation}: {rate:,.0f} jobs/s"
                )
    return rows


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'backend':<10} {'path':<12} {'jobs':>6} {'queuecore':>10} {'floor':>9} "
        f"{'peer':>18} {'qc/floor':>8} {'qc/peer':>8} {'async':>9} {'async/qc':>8}"
    ]
    for row in rows:
        peer = PEERS[row.backend]
        rate = row.median(QUEUECORE)
        lines.append(
            f"{row.backend:<10} {row.shape:<12} {row.jobs:>6,} {fmt(rate):>10} "
            f"{fmt(row.median(FLOOR)):>9} {peer + ' ' + fmt(row.median(peer)):>18} "
            f"{fmt(ratio(rate, row.median(FLOOR)), '.2f'):>8} "
            f"{fmt(ratio(rate, row.median(peer)), '.2f'):>8} "
            f"{fmt(row.median(QUEUECORE_ASYNC)):>9} "
            f"{fmt(ratio(row.median(QUEUECORE_ASYNC), rate), '.2f'):>8}"
        )
    return lines


#: enqueue_many of 10,000 jobs on PostgreSQL, jobs/s: the one absolute target.
MANY_ON_POSTGRES = 50_000


def targets(rows: list[Row], checks: list[Check]) -> None:
    for row in rows:
        where = f"{row.shape} {row.backend}"
        if row.shape == SINGLE:
            rate = ratio(row.median(QUEUECORE), row.median(FLOOR))
            check(checks, f"{where}: queuecore >= 0.8x floor", rate, 0.8)
            concurrent = ratio(row.median(QUEUECORE_ASYNC), row.median(QUEUECORE))
            check(checks, f"{where}: async from {TASKS} tasks >= 0.8x sync", concurrent, 0.8)
        elif row.backend == "postgresql":
            check(
                checks,
                f"{where} x{row.jobs:,}: queuecore >= {MANY_ON_POSTGRES:,} jobs/s",
                row.median(QUEUECORE),
                MANY_ON_POSTGRES,
            )
