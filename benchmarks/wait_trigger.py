"""What migration 0003's NOTIFY trigger costs the PostgreSQL hot path.

The trigger fires only for jobs a `wait()` marked, so a completion nobody waits for
should cost what it did before the trigger existed. Measured side by side on one
database: one process claims and completes N jobs (one claim, one complete per job,
each its own autocommit statement, as `queuecore` does), in rounds that alternate
between the table with the trigger, the table without it, and (to see what NOTIFY on
every completion would have cost) the trigger firing for every job.

    python -m benchmarks.wait_trigger --pg-dsn postgresql+psycopg://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import sqlalchemy as sa

import queuecore
from benchmarks.databases import seed

TRIGGER = "queuecore_jobs_finished"
VARIANTS = {
    "trigger (awaited jobs only)": "ENABLE",
    "no trigger": "DISABLE",
    "trigger on every job": "EVERY",
}


def run(dsn: str, jobs: int) -> float:
    # Commits that wait for no disk flush, so what shows is the work of each statement.
    queue = queuecore.connect(dsn, connect_args={"options": "-c synchronous_commit=off"})
    try:
        started = time.perf_counter()
        while claimed := queue.claim("bench"):
            queue.complete(claimed[0])
        return jobs / (time.perf_counter() - started)
    finally:
        queue.close()


def prepare(dsn: str, variant: str, jobs: int) -> None:
    engine = sa.create_engine(dsn)
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE queuecore_jobs")
        mode = VARIANTS[variant]
        conn.exec_driver_sql(
            f"ALTER TABLE queuecore_jobs {'DISABLE' if mode == 'DISABLE' else 'ENABLE'} "
            f"TRIGGER {TRIGGER}"
        )
    seed(dsn, jobs)
    if VARIANTS[variant] == "EVERY":
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE queuecore_jobs SET awaited = true")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE queuecore_jobs")  # every variant starts clean
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-dsn", required=True)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    admin = sa.create_engine(args.pg_dsn, isolation_level="AUTOCOMMIT")
    name = f"queuecore_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    dsn = sa.make_url(args.pg_dsn).set(database=name).render_as_string(hide_password=False)
    try:
        queuecore.migrate(dsn)
        figures: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                prepare(dsn, variant, args.jobs)
                figures[variant].append(run(dsn, args.jobs))
        base = statistics.median(figures["no trigger"])
        for variant, values in figures.items():
            median = statistics.median(values)
            print(f"{variant:30} {median:8.0f} jobs/s  ({median / base:.3f} of no trigger)")
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
