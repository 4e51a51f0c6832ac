"""Claim latency: one process times claim(1) + complete, one job after another, on a
queue of ready jobs beside many finished rows.

Scenarios: `fresh` (only the ready jobs), `done` (a million done rows beside them), and
on PostgreSQL `purged` (a million jobs went through queued → running → done and were
purged, with no VACUUM but the server's autovacuum: the dead tuples they left are what
the claim must not trip over).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import sqlalchemy as sa

from benchmarks.implementations import FLOOR, QUEUECORE, Target

WARM_UP = 100


@dataclass(frozen=True)
class Latency:
    median_ms: float
    p99_ms: float
    samples: int


def measure(implementation: str, target: Target, samples: int) -> Latency:
    """Times `samples` claim + complete pairs after a warm-up (prepared statements,
    caches); the queue must hold at least WARM_UP + samples ready jobs."""
    if implementation == QUEUECORE:
        import queuecore

        queue = queuecore.connect(target.url)

        def claim_and_complete() -> None:
            [job] = queue.claim("latency")
            if not queue.complete(job):
                raise RuntimeError("a fenced complete failed")

        close = queue.close
    elif implementation == FLOOR:
        from benchmarks.floors import PostgresFloor, SQLiteFloor

        floor = (
            SQLiteFloor(target.location, synchronous=target.synchronous)
            if target.backend == "sqlite"
            else PostgresFloor(target.libpq_dsn)
        )

        def claim_and_complete() -> None:
            [job] = floor.claim("latency", 1)
            if not floor.complete(job[0], job[-1]):
                raise RuntimeError("a fenced complete failed")

        close = floor.close
    else:
        raise ValueError(f"no latency runner for {implementation}")
    try:
        for _ in range(WARM_UP):
            claim_and_complete()
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            claim_and_complete()
            times.append(time.perf_counter() - start)
    finally:
        close()
    cuts = statistics.quantiles(times, n=100)
    return Latency(statistics.median(times) * 1000, cuts[98] * 1000, samples)


def churn(url: str, jobs: int, *, pace: int = 5000, purge_batch: int = 1000) -> None:
    """Takes `jobs` jobs through a queue's life at `pace` jobs per second: each second's
    worth is enqueued, claimed, completed (each a statement of its own, as set-based
    updates) and purged in short batches as `purge` does. The dead tuples and index
    entries left behind are those of the real traffic; the pace is above what queuecore
    sustained on the benchmark's machine, so autovacuum has no more time than it would
    have in production (bulk updates as fast as the server can go would give it less)."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    now = "extract(epoch FROM clock_timestamp())"
    started = time.monotonic()
    with engine.connect() as conn:
        for second, first in enumerate(range(0, jobs, pace)):
            conn.exec_driver_sql(
                "INSERT INTO queuecore_jobs (kind, queue, payload, priority, state, attempts, "
                f"max_attempts, visible_at, created_at) SELECT 'noop', 'default', "
                f"jsonb_build_object('n', i), 0, 'queued', 0, 5, {now}, {now} "
                f"FROM generate_series(1, {min(pace, jobs - first)}) AS i"
            )
            conn.exec_driver_sql(
                "UPDATE queuecore_jobs SET state = 'running', attempts = 1, "
                f"visible_at = {now} + 30, lease_token = md5(id::text), worker = 'churn' "
                "WHERE state = 'queued'"
            )
            conn.exec_driver_sql(
                f"UPDATE queuecore_jobs SET state = 'done', finished_at = {now}, "
                "lease_token = NULL WHERE state = 'running'"
            )
            while (
                conn.exec_driver_sql(
                    "DELETE FROM queuecore_jobs WHERE id IN (SELECT id FROM queuecore_jobs "
                    f"WHERE state = 'done' LIMIT {purge_batch})"
                ).rowcount
                == purge_batch
            ):
                pass
            time.sleep(max(0.0, started + second + 1 - time.monotonic()))
    engine.dispose()
