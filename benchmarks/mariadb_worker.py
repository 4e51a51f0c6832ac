"""Whole workers on MariaDB, beside whole workers on PostgreSQL, in one run:

    python -m benchmarks.mariadb_worker [--jobs 2000] [--processes 1 4] [--repeats 3]

`queuecore worker` processes with every default drain N no-op jobs (the harness of
`worker_e2e`: gated start, the clock stopped at the first poll that finds none left,
every job checked done on its first attempt), and so does queuecore's best library
loop, in the same harness. No job queue of Python's runs on MariaDB, so the peer a
user would pick instead is the same worker on PostgreSQL, the other many-hosts backend,
on the same machine in the same run. Each measurement gets a database of its own,
migrated and seeded through queuecore's API; all are dropped at the end.

The servers: $QUEUECORE_BENCH_MARIADB_DSN and $QUEUECORE_BENCH_POSTGRES_DSN (by default
the local ones, as the test suite uses them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

import queuecore
from benchmarks.implementations import Target
from benchmarks.worker_e2e import LOOP, WORKER, Run, measure

SERVERS = {
    "mariadb": os.environ.get(
        "QUEUECORE_BENCH_MARIADB_DSN", "mariadb+mysqldb://root@127.0.0.1:3306/test"
    ),
    "postgresql": os.environ.get(
        "QUEUECORE_BENCH_POSTGRES_DSN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
}
IMPLEMENTATIONS = (WORKER, LOOP)


@contextmanager
def scratch(server: str, *, force_drop: bool = False) -> Iterator[str]:
    """A database of its own on `server`, migrated and dropped afterwards; `force_drop`
    (PostgreSQL) ends the sessions a pooler still holds on it first."""
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    name = admin.dialect.identifier_preparer.quote(f"qc_bench_{uuid.uuid4().hex[:10]}")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = sa.make_url(server).set(database=name.strip('`"'))
    dsn = url.render_as_string(hide_password=False)
    try:
        queuecore.migrate(dsn)
        yield dsn
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if force_drop else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        admin.dispose()


def drain(
    backend: str,
    implementation: str,
    processes: int,
    jobs: int,
    folder: Path,
    *,
    server: str | None = None,
) -> Run:
    """One drain in a scratch database of its own on `server` (by default SERVERS')."""
    with scratch(server or SERVERS[backend]) as dsn:
        with queuecore.connect(dsn) as queue:
            queue.enqueue_many("noop", [{}] * jobs)
        return measure(implementation, Target(backend, dsn), processes, jobs, folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mariadb_worker")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rates: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="qc-bench-") as folder:
        for repeat in range(args.repeats):  # interleaved: a disturbance hits every row
            for processes in args.processes:
                for backend in SERVERS:
                    for implementation in IMPLEMENTATIONS:
                        run = drain(backend, implementation, processes, args.jobs, Path(folder))
                        if not run.exactly_once:
                            raise SystemExit(f"{implementation} on {backend}: a job ran twice")
                        rates.setdefault((backend, processes, implementation), []).append(
                            run.jobs_per_s
                        )
                        print(
                            f"[{repeat + 1}/{args.repeats}] {backend} {processes}p "
                            f"{implementation}: {run.jobs_per_s:,.0f} jobs/s",
                            flush=True,
                        )
    print(f"\n{args.jobs} no-op jobs, medians of {args.repeats} (jobs/s):")
    print(f"{'procs':>5} {'MariaDB worker':>15} {'loop':>7} {'PG worker':>10} {'loop':>7}  "
          "MariaDB/PG worker")  # fmt: skip
    for processes in args.processes:
        med = {
            (b, i): statistics.median(rates[(b, processes, i)])
            for b in SERVERS
            for i in IMPLEMENTATIONS
        }
        m, p = med[("mariadb", WORKER)], med[("postgresql", WORKER)]
        print(
            f"{processes:>5} {m:>15,.0f} {med[('mariadb', LOOP)]:>7,.0f} {p:>10,.0f} "
            f"{med[('postgresql', LOOP)]:>7,.0f}  {m / p:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
