"""Whole workers on PostgreSQL straight to the server, beside the same workers through a
transaction-mode PgBouncer in front of that server, in one run:

    python -m benchmarks.pooler_worker [--jobs 2000] [--processes 1 4] [--repeats 3]

What a deployment pays for putting the pooler between its workers and the server (R34):
`queuecore worker` processes with every default drain N no-op jobs in `worker_e2e`'s
harness (gated start, every job checked done on its first attempt), once on the server's
DSN and once on the pooler's (`?prepare_threshold=none`, as R34 asks). Through the
pooler the worker gets no LISTEN, so it polls: the figures include that. The pooler is a
private one (queuecore.conformance.pgbouncer), started for the run and stopped after.

The server: $QUEUECORE_BENCH_POSTGRES_DSN (by default the local one the suite uses).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import queuecore
from benchmarks.implementations import Target
from benchmarks.mariadb_worker import SERVERS, scratch
from benchmarks.worker_e2e import WORKER, Run, keep, measure
from queuecore.conformance.pgbouncer import PgBouncer

ROUTES = ("direct", "pgbouncer")


def drain(route: str, pooler: PgBouncer, processes: int, jobs: int, folder: Path) -> Run:
    with scratch(SERVERS["postgresql"], force_drop=True) as dsn:
        with queuecore.connect(dsn) as queue:
            queue.enqueue_many("noop", [{}] * jobs)
        if route == "pgbouncer":
            database = dsn.rsplit("/", 1)[1]
            dsn = pooler.dsn(database)
        return measure(WORKER, Target("postgresql", dsn), processes, jobs, folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pooler_worker")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rates: dict[tuple[str, int], list[float]] = {}
    with (
        PgBouncer(SERVERS["postgresql"]) as pooler,
        tempfile.TemporaryDirectory(prefix="qc-bench-") as folder,
    ):
        for repeat in range(args.repeats):  # interleaved: a disturbance hits every row
            for processes in args.processes:
                for route in ROUTES:
                    run = drain(route, pooler, processes, args.jobs, Path(folder))
                    label = f"{processes}p {route}"
                    keep(rates, (route, processes), run, label, repeat, args.repeats)
    print(f"\n{args.jobs} no-op jobs, medians of {args.repeats} (jobs/s):")
    print(f"{'procs':>5} {'direct':>8} {'PgBouncer':>10}  PgBouncer/direct")
    for processes in args.processes:
        direct = statistics.median(rates[("direct", processes)])
        pooled = statistics.median(rates[("pgbouncer", processes)])
        print(f"{processes:>5} {direct:>8,.0f} {pooled:>10,.0f}  {pooled / direct:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
