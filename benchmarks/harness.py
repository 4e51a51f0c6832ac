"""The benchmark run: every measurement in turn, then the table, the targets and the JSON."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import (
    burst,
    databases,
    enqueue,
    latency,
    mariadb_family,
    mariadb_worker,
    throughput,
    worker_e2e,
)
from benchmarks.checks import Check, check, exit_status, fmt, ratio
from benchmarks.implementations import (
    FLOOR,
    FLOOR_ONE_STATEMENT,
    HUEY,
    PGQUEUER,
    QUEUECORE,
    QUEUECORE_ASYNC,
    QUEUECORE_BATCHED,
    TASKS,
    Target,
)

PEERS = {"sqlite": HUEY, "postgresql": PGQUEUER}

DESCRIPTION = """queuecore against its raw-driver floors and its peers, side by side, in one
run. Without --pg-dsn (or QUEUECORE_BENCH_POSTGRES_DSN) a private PostgreSQL with
initdb's stock settings is started for the run and removed after."""


@dataclass(frozen=True)
class Plan:
    """How much to measure: the full run, or a quick one to check the harness."""

    jobs: int = 10_000
    workers: tuple[int, ...] = (1, 2, 4, 8)
    limits: tuple[int, ...] = (1, 10)
    #: synchronous=FULL is several times slower: measured at fewer worker counts.
    full_sync_workers: tuple[int, ...] = (1, 4)
    repeats: int = 3
    done_rows: int = 1_000_000
    latency_samples: int = 1000
    #: The worker end-to-end family: jobs per drain, and how many worker processes.
    e2e_jobs: int = 10_000
    e2e_processes: tuple[int, ...] = (1, 2, 4)
    #: The burst family (PostgreSQL): jobs per drain, and how many worker processes.
    burst_jobs: int = 50_000
    burst_processes: tuple[int, ...] = (1, 4)
    #: The enqueue family: single enqueues timed, and the size of one enqueue_many.
    enqueue_jobs: int = 2_000
    enqueue_many_jobs: int = 10_000


QUICK = Plan(
    jobs=2000,
    workers=(1, 4),
    full_sync_workers=(1,),
    repeats=1,
    done_rows=50_000,
    latency_samples=300,
    e2e_jobs=2000,
    e2e_processes=(1, 4),
    burst_jobs=10_000,
    enqueue_jobs=500,
)

FAMILIES = ("worker", "burst", "throughput", "enqueue", "latency", "mariadb")


@dataclass
class Row:
    """One configuration, every implementation's runs side by side."""

    backend: str
    workers: int
    limit: int
    synchronous: str | None
    runs: dict[str, list[throughput.Run]] = field(default_factory=dict)

    def median(self, implementation: str) -> float | None:
        runs = self.runs.get(implementation)
        return statistics.median(r.jobs_per_s for r in runs) if runs else None

    def rss(self, implementation: str) -> float | None:
        runs = self.runs.get(implementation)
        return max(r.peak_rss_mb for r in runs) if runs else None


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def implementations(backend: str, limit: int) -> list[str]:
    chosen = [QUEUECORE, QUEUECORE_ASYNC, FLOOR]
    if backend == "sqlite" and limit == 1:
        chosen.append(FLOOR_ONE_STATEMENT)
    if limit > 1:
        chosen.append(QUEUECORE_BATCHED)
    peer = PEERS[backend]
    # huey dequeues one job at a time: its one run per worker count serves both rows.
    if installed(peer) and not (peer == HUEY and limit > 1):
        chosen.append(peer)
    return chosen


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_throughput(plan: Plan, dbs: throughput.Databases, backends: list[str]) -> list[Row]:
    rows: list[Row] = []
    for backend in backends:
        configs = [(w, limit, "NORMAL") for limit in plan.limits for w in plan.workers]
        if backend == "sqlite":
            configs += [(w, limit, "FULL") for limit in plan.limits for w in plan.full_sync_workers]
        for workers, limit, sync in configs:
            rows.append(Row(backend, workers, limit, sync if backend == "sqlite" else None))
    for repeat in range(plan.repeats):
        for row in rows:
            for implementation in implementations(row.backend, row.limit):
                target = dbs.prepare(implementation, row.backend, row.synchronous or "", plan.jobs)
                result = throughput.measure(
                    implementation, target, row.workers, row.limit, plan.jobs
                )
                dbs.discard(target)
                if not result.exactly_once:
                    raise RuntimeError(f"{implementation} did not run every job exactly once")
                row.runs.setdefault(implementation, []).append(result)
                log(
                    f"[{repeat + 1}/{plan.repeats}] {row.backend} {row.synchronous or ''} "
                    f"{row.workers}w x{row.limit} {implementation}: {result.jobs_per_s:,.0f} jobs/s"
                )
    return rows


def run_latency(
    plan: Plan, folder: Path, postgres: databases.PostgresDatabases | None, backends: list[str]
) -> list[dict[str, Any]]:
    queued = latency.WARM_UP + plan.latency_samples
    scenarios: list[tuple[str, str, int]] = []
    for backend in backends:
        scenarios += [(backend, "fresh", 0), (backend, "done", plan.done_rows)]
        if backend == "postgresql":
            scenarios.append((backend, "purged", plan.done_rows))
    results = []
    for backend, scenario, rows in scenarios:
        entry: dict[str, Any] = {"backend": backend, "scenario": scenario, "rows": rows}
        started = time.monotonic()
        targets = {
            implementation: latency_target(folder, postgres, backend, scenario, implementation)
            for implementation in (QUEUECORE, FLOOR)
        }
        if scenario == "purged":
            # Set-up, not a measurement: both tables churn at once to halve the wait.
            with ThreadPoolExecutor(len(targets)) as pool:
                urls = [t.url for t in targets.values()]
                list(pool.map(latency.churn, urls, [rows] * len(urls)))
        for target in targets.values():
            databases.seed(
                target.url,
                queued=queued,
                done=rows if scenario == "done" else 0,
                analyze=scenario != "purged",
            )
        log(f"latency {backend} {scenario}: set-up {time.monotonic() - started:.0f} s")
        for implementation, target in targets.items():
            if postgres is not None:
                postgres.checkpoint()
            measured = latency.measure(implementation, target, plan.latency_samples)
            entry[implementation] = asdict(measured)
            log(
                f"latency {backend} {scenario} {implementation}: median {measured.median_ms:.3f} ms"
                f", p99 {measured.p99_ms:.3f} ms"
            )
        results.append(entry)
    return results


def latency_target(
    folder: Path,
    postgres: databases.PostgresDatabases | None,
    backend: str,
    scenario: str,
    implementation: str,
) -> Target:
    """An empty, migrated table: queuecore's at head, the floor's at the first migration."""
    revision = databases.FLOOR_REVISION if implementation == FLOOR else "head"
    if backend == "sqlite":
        url = f"sqlite:///{folder / f'latency-{scenario}-{implementation}.db'}"
        target = Target("sqlite", url.removeprefix("sqlite:///"))
    else:
        assert postgres is not None
        url = postgres.create(f"latency_{scenario}_{implementation.split()[0]}")
        target = Target("postgresql", url)
    databases.migrate(url, revision)
    return target


def throughput_table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'backend':<10} {'sync':<6} {'workers':>7} {'claim':>5} {'queuecore':>10} "
        f"{'floor':>9} {'peer':>18} {'qc/floor':>8} {'qc/peer':>8} {'RSS MB qc/floor/peer':>21}"
        f" {'1-stmt floor':>12} {'qc/1-stmt':>9}"
    ]
    for row in rows:
        peer = PEERS[row.backend]
        peer_rate = row.median(peer)
        if peer == HUEY and peer_rate is None:
            peer_rate = next(
                (
                    r.median(HUEY)
                    for r in rows
                    if r.backend == row.backend
                    and r.workers == row.workers
                    and r.synchronous == row.synchronous
                    and r.median(HUEY) is not None
                ),
                None,
            )
        for implementation in (QUEUECORE, QUEUECORE_ASYNC, QUEUECORE_BATCHED):
            rate = row.median(implementation)
            if rate is None:
                continue
            label = {
                QUEUECORE: "",
                QUEUECORE_ASYNC: f" async API, {TASKS} tasks a worker",
                QUEUECORE_BATCHED: " +complete_many ack window",
            }[implementation]
            rss = "/".join(fmt(row.rss(i), ".0f") for i in (implementation, FLOOR, peer))
            lines.append(
                f"{row.backend:<10} {row.synchronous or '':<6} {row.workers:>7} "
                f"{row.limit:>5} {fmt(rate):>10} {fmt(row.median(FLOOR)):>9} "
                f"{peer + ' ' + fmt(peer_rate):>18} "
                f"{fmt(ratio(rate, row.median(FLOOR)), '.2f'):>8} "
                f"{fmt(ratio(rate, peer_rate), '.2f'):>8} {rss:>21}"
                f" {fmt(row.median(FLOOR_ONE_STATEMENT)):>12}"
                f" {fmt(ratio(rate, row.median(FLOOR_ONE_STATEMENT)), '.2f'):>9}{label}"
            )
    return lines


def latency_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'backend':<10} {'scenario':<8} {'rows':>9} {'queuecore ms':>16} {'floor ms':>16} "
        f"{'qc/floor':>8} {'qc/fresh':>8}   (median / p99 of claim + complete)"
    ]
    fresh = {r["backend"]: r[QUEUECORE]["median_ms"] for r in results if r["scenario"] == "fresh"}
    for r in results:
        qc, floor = r[QUEUECORE], r[FLOOR]
        lines.append(
            f"{r['backend']:<10} {r['scenario']:<8} {r['rows']:>9,} "
            f"{qc['median_ms']:>7.3f} / {qc['p99_ms']:<6.3f} "
            f"{floor['median_ms']:>7.3f} / {floor['p99_ms']:<6.3f} "
            f"{fmt(ratio(qc['median_ms'], floor['median_ms']), '.2f'):>8} "
            f"{fmt(ratio(qc['median_ms'], fresh.get(r['backend'])), '.2f'):>8}"
        )
    return lines


def targets(rows: list[Row], lat: list[dict[str, Any]], checks: list[Check]) -> None:
    """The targets of issues 4 and 12 for the library loop and latency, on this run."""
    for row in rows:
        where = f"{row.backend} {row.synchronous or ''} {row.workers}w x{row.limit}".replace(
            "  ", " "
        )
        check(
            checks,
            f"{where}: queuecore >= 0.8x floor",
            ratio(row.median(QUEUECORE), row.median(FLOOR)),
            0.8,
        )
        check(
            checks,
            f"{where}: async claim+complete >= 0.8x sync",
            ratio(row.median(QUEUECORE_ASYNC), row.median(QUEUECORE)),
            0.8,
        )
        if row.limit == 1 and row.backend == "sqlite" and row.synchronous == "NORMAL":
            check(
                checks,
                f"{where}: queuecore >= 1.0x huey dequeue loop",
                ratio(row.median(QUEUECORE), row.median(HUEY)),
                1.0,
            )
        if row.limit > 1 and row.backend == "sqlite":
            check(
                checks,
                f"{where}: complete_many >= 1.0x floor",
                ratio(row.median(QUEUECORE_BATCHED), row.median(FLOOR)),
                1.0,
            )
        if row.limit > 1 and row.backend == "postgresql" and row.workers in (1, 4):
            check(
                checks,
                f"{where}: complete_many >= 1.5x pgqueuer",
                ratio(row.median(QUEUECORE_BATCHED), row.median(PGQUEUER)),
                1.5,
            )
    for row in rows:
        if row.backend == "sqlite" and row.workers == 4:
            single = next(
                (
                    r
                    for r in rows
                    if r.backend == "sqlite"
                    and r.workers == 1
                    and r.limit == row.limit
                    and r.synchronous == row.synchronous
                ),
                None,
            )
            if single is not None:
                check(
                    checks,
                    f"sqlite {row.synchronous} x{row.limit}: 4 workers >= 0.8x 1 worker",
                    ratio(row.median(QUEUECORE), single.median(QUEUECORE)),
                    0.8,
                )
    fresh = {r["backend"]: r[QUEUECORE]["median_ms"] for r in lat if r["scenario"] == "fresh"}
    for r in lat:
        if r["scenario"] == "done":
            check(
                checks,
                f"{r['backend']} latency with {r['rows']:,} done rows <= 2x floor",
                ratio(r[QUEUECORE]["median_ms"], r[FLOOR]["median_ms"]),
                2.0,
                at_most=True,
            )
        if r["scenario"] == "purged":
            check(
                checks,
                f"{r['backend']} latency after {r['rows']:,} purged <= 3x fresh",
                ratio(r[QUEUECORE]["median_ms"], fresh.get(r["backend"])),
                3.0,
                at_most=True,
            )


def machine(postgres: databases.PostgresDatabases | None) -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    versions = {}
    for dist in ("queuecore", "SQLAlchemy", "psycopg", "huey", "pgqueuer", "asyncpg"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "commit": commit or None,
        "packages": versions,
    }
    if postgres is not None:
        info["postgresql"] = postgres.setting("server_version")
        info["postgresql_autovacuum"] = postgres.setting("autovacuum")
        info["postgresql_synchronous_commit"] = postgres.setting("synchronous_commit")
    return info


@contextlib.contextmanager
def postgres_server(args: argparse.Namespace) -> Iterator[str | None]:
    if args.no_postgres:
        yield None
    elif args.pg_dsn:
        yield args.pg_dsn
    else:
        log("starting a private PostgreSQL with stock settings (pass --pg-dsn to use yours)")
        with databases.private_postgres() as url:
            yield url


def _counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive counts, as `--workers` and `--claims` take."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected counts like 1,2,4, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"counts must be at least 1, got {text!r}")
    return counts


def _families(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"families are {', '.join(FAMILIES)}; got {text!r}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=DESCRIPTION)
    parser.add_argument(
        "--quick", action="store_true", help="a small run (~3 min) to check the harness"
    )
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument(
        "--pg-dsn",
        default=os.environ.get("QUEUECORE_BENCH_POSTGRES_DSN"),
        help="a PostgreSQL server to create scratch databases on (default: a private one)",
    )
    parser.add_argument(
        "--mariadb-dsn",
        default=mariadb_worker.SERVERS["mariadb"],
        help="the MariaDB server of the mariadb family, for scratch databases it creates "
        "and drops (default: $QUEUECORE_BENCH_MARIADB_DSN, else the local server the "
        "test suite uses)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--repeats", type=int, help="runs per row (median is shown)")
    parser.add_argument(
        "--families",
        type=_families,
        default=FAMILIES,
        help=f"which families to measure, comma-separated (default: {','.join(FAMILIES)})",
    )
    parser.add_argument("--skip-latency", action="store_true", help="leave the latency out")
    parser.add_argument(
        "--only",
        choices=("sqlite", "postgresql", "mariadb"),
        help="measure this backend's rows only",
    )
    parser.add_argument(
        "--workers",
        type=_counts,
        help="throughput rows with these worker counts, and worker rows with these many "
        "processes, e.g. 1,2,4",
    )
    parser.add_argument(
        "--claims", type=_counts, help="throughput rows claiming these many jobs, e.g. 1"
    )
    return parser


def plan_of(args: argparse.Namespace) -> Plan:
    """The plan the options ask for: the full or quick one, narrowed by the filters."""
    plan = QUICK if args.quick else Plan()
    narrowed: dict[str, Any] = {}
    if args.repeats:
        narrowed["repeats"] = args.repeats
    if args.workers:
        narrowed["workers"] = args.workers
        narrowed["e2e_processes"] = args.workers
        narrowed["burst_processes"] = args.workers
        narrowed["full_sync_workers"] = tuple(
            w for w in plan.full_sync_workers if w in args.workers
        )
    if args.claims:
        narrowed["limits"] = args.claims
    return Plan(**{**asdict(plan), **narrowed})


def main(argv: list[str] | None = None) -> int:
    """Measures, prints the tables and the targets; exits 1 when a target was missed."""
    # The floors and huey run on the stdlib's sqlite3: queuecore (and every worker process
    # it spawns) must too, not the pysqlite3 it would pick by default, to compare like
    # with like.
    os.environ.setdefault("QUEUECORE_SQLITE_DRIVER", "sqlite3")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.only == "postgresql" and args.no_postgres:
        parser.error("--only postgresql contradicts --no-postgres")
    plan = plan_of(args)
    families = [f for f in args.families if not (f == "latency" and args.skip_latency)]
    started = time.monotonic()
    if args.only in ("sqlite", "mariadb"):
        args.no_postgres = True
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="qcbench-") as scratch, postgres_server(args) as server:
        postgres = databases.PostgresDatabases(server) if server else None
        available = ["sqlite"] + (["postgresql"] if postgres else [])
        backends = [b for b in available if args.only in (None, b)]
        dbs = throughput.Databases(Path(scratch), postgres)
        try:
            info = machine(postgres)
            workers = (
                worker_e2e.run(
                    dbs, backends, plan.e2e_processes, plan.e2e_jobs, plan.repeats, installed, log
                )
                if "worker" in families
                else []
            )
            bursts = (
                burst.run(dbs, plan.burst_processes, plan.burst_jobs, plan.repeats, log)
                if "burst" in families and "postgresql" in backends
                else None
            )
            rows = run_throughput(plan, dbs, backends) if "throughput" in families else []
            enqueues = (
                enqueue.run(
                    dbs,
                    backends,
                    plan.enqueue_jobs,
                    plan.enqueue_many_jobs,
                    plan.repeats,
                    installed,
                    log,
                )
                if "enqueue" in families
                else []
            )
            lat = (
                run_latency(plan, Path(scratch), postgres, backends)
                if "latency" in families
                else []
            )
            maria = (
                mariadb_family.run(
                    args.mariadb_dsn,
                    plan.e2e_processes,
                    plan.e2e_jobs,
                    plan.repeats,
                    Path(scratch),
                    log,
                )
                if "mariadb" in families and args.only in (None, "mariadb")
                else None
            )
        finally:
            if postgres is not None:
                postgres.drop_all()
    info["load_average_before_after"] = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    checks: list[Check] = []
    worker_e2e.targets(workers, checks)
    burst.targets(bursts, checks)
    targets(rows, lat, checks)
    enqueue.targets(enqueues, checks)
    mariadb_family.targets(maria, checks)
    out = [
        f"queuecore benchmark ({'quick' if args.quick else 'full'}, {', '.join(families)}; "
        f"median of {plan.repeats}), {time.monotonic() - started:.0f} s",
        "machine: " + ", ".join(f"{k}={v}" for k, v in info.items() if k != "packages"),
    ]
    if workers:
        out += [
            "",
            f"worker end to end: {plan.e2e_jobs:,} no-op jobs, default options, jobs/s from "
            "the gate (all processes started) to an empty queue",
            *worker_e2e.table(workers),
        ]
    if bursts is not None:
        out += ["", *burst.table(bursts)]
    if rows:
        out += ["", f"library loop: {plan.jobs:,} jobs per run", *throughput_table(rows)]
    if enqueues:
        out += ["", "enqueue: jobs/s", *enqueue.table(enqueues)]
    if lat:
        out += ["", *latency_table(lat)]
    if maria is not None:
        out += ["", *mariadb_family.table(maria, plan.e2e_jobs)]
    out += [
        "",
        "targets:",
        *(
            f"  {'held  ' if c['held'] else 'MISSED'} {c['target']}: {fmt(c['value'], '.2f')}"
            for c in checks
        ),
    ]
    print("\n".join(out))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "plan": asdict(plan),
                    "machine": info,
                    "worker": [
                        {
                            "backend": r.backend,
                            "processes": r.processes,
                            "runs": {i: [asdict(x) for x in runs] for i, runs in r.runs.items()},
                            "median_jobs_per_s": {i: r.median(i) for i in r.runs},
                        }
                        for r in workers
                    ],
                    "burst": None if bursts is None else burst.as_json(bursts),
                    "throughput": [
                        {
                            **{k: v for k, v in asdict(r).items() if k != "runs"},
                            "runs": {i: [asdict(x) for x in runs] for i, runs in r.runs.items()},
                            "median_jobs_per_s": {i: r.median(i) for i in r.runs},
                        }
                        for r in rows
                    ],
                    "enqueue": [asdict(r) for r in enqueues],
                    "latency": lat,
                    "mariadb": None if maria is None else mariadb_family.as_json(maria),
                    "targets": checks,
                },
                indent=2,
            )
        )
    return exit_status(checks)
