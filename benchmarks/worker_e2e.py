"""Worker end to end: real worker processes, started as a user starts them with default
options, drain a queue of N no-op jobs; jobs per second from the gate opening (every
process has started and imported its app, see `gate.py`) until the queue is empty.

The same clock and the same "empty" for every implementation: the harness polls the
queue's own table every POLL_S and stops the clock at the first poll that finds no job
left to do (for queuecore: none queued or running, so every completion has committed;
for huey and pgqueuer: no row left in their queue table). Process start, from spawn to
the gate, is measured too and shown beside the figure, never inside it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import gate
from benchmarks.checks import Check, check, fmt, ratio
from benchmarks.implementations import HUEY, PGQUEUER, QUEUECORE, Target

#: `queuecore worker` with every default, its per-job INFO lines included.
WORKER = "queuecore worker"
#: The same with `--log-level WARNING`: what the per-job log line costs.
WORKER_QUIET = "queuecore worker, no per-job log"
#: The same with the registry's handler an `async def` one (ADR 0011's event loop).
WORKER_ASYNC = "queuecore worker, async handler"
#: queuecore's best library loop (claim 10, `complete_many` ack window), same harness.
LOOP = "library loop"
HUEY_CONSUMER = "huey consumer"
PGQUEUER_WORKER = "pgqueuer worker"

#: Which seeded queue each implementation drains (as `throughput.Databases` prepares it).
SEEDS = {
    WORKER: QUEUECORE,
    WORKER_QUIET: QUEUECORE,
    WORKER_ASYNC: QUEUECORE,
    LOOP: QUEUECORE,
    HUEY_CONSUMER: HUEY,
    PGQUEUER_WORKER: PGQUEUER,
}
PEERS = {"sqlite": HUEY_CONSUMER, "postgresql": PGQUEUER_WORKER}
#: How far ahead of the peer's whole worker queuecore's is to be, by processes (issue
#: 29: 1.2x huey's consumer with 1 and 4, pgqueuer's worker 1.0x with 1 and 1.5x with 4;
#: issue 12's 1.0x huey with 2).
PEER_BOUNDS = {"sqlite": {1: 1.2, 2: 1.0, 4: 1.2}, "postgresql": {1: 1.0, 4: 1.5}}

POLL_S = 0.005
START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 600
STOP_TIMEOUT_S = 60
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Run:
    """One measured drain by whole processes."""

    jobs_per_s: float
    seconds: float
    start_s: float  # spawn to gate, the slowest process: not inside `seconds`
    exactly_once: bool


def command(implementation: str, target: Target) -> list[str]:
    """The command a user would type, with its default options."""
    python = sys.executable
    if implementation in (WORKER, WORKER_QUIET, WORKER_ASYNC):
        registry = "ASYNC_REGISTRY" if implementation == WORKER_ASYNC else "REGISTRY"
        cmd = [python, "-m", "queuecore", "worker", f"benchmarks.apps_queuecore:{registry}"]
        cmd += ["--dsn", target.url]
        if implementation == WORKER_QUIET:
            cmd += ["--log-level", "WARNING"]
        return cmd
    if implementation == LOOP:
        return [python, "-m", "benchmarks.apps_loop"]
    if implementation == HUEY_CONSUMER:
        return [python, "-m", "huey.bin.huey_consumer", "benchmarks.apps_huey.huey"]
    if implementation == PGQUEUER_WORKER:
        return [python, "-m", "benchmarks.apps_pgqueuer"]  # `pgq run`, see there
    raise ValueError(f"no command for {implementation}")


def app_dsn(implementation: str, target: Target) -> str:
    if implementation == HUEY_CONSUMER:
        return target.location
    if implementation == PGQUEUER_WORKER:
        return target.libpq_dsn
    return target.url


def stop_signal(implementation: str) -> signal.Signals:
    """Each one's graceful stop: huey's consumer stops gracefully on SIGINT."""
    return signal.SIGINT if implementation == HUEY_CONSUMER else signal.SIGTERM


class Remaining:
    """Whether any job is left in a queue (1) or none (0), read with the bare driver.

    One row is enough to know, found by an index: a count(*) read every live row at
    every poll (every POLL_S), and on MariaDB that read was most of the server's work, so
    the harness slowed what it measured, and the more so the longer a run took (issue
    29: 1,879 rows examined a poll, 96% of all rows the run examined). On SQLite and
    PostgreSQL the first live row is looked for in the claim's own order, which walks
    the index of live jobs: without it the planner scanned the table from its start,
    past every job already done (2.6 ms of the harness's CPU a poll, a third of a core
    taken from the worker it measured, on 40,000 jobs); MariaDB's index on `state`
    serves the plain condition."""

    def __init__(self, implementation: str, target: Target) -> None:
        seed = SEEDS[implementation]
        if seed == HUEY:
            left = "SELECT 1 FROM task"
        elif seed == PGQUEUER:
            left = "SELECT 1 FROM pgqueuer"
        else:
            left = "SELECT 1 FROM queuecore_jobs WHERE state IN ('queued', 'running')"
            if target.backend in ("sqlite", "postgresql"):
                left += " ORDER BY priority, visible_at, id"
        self.sql = f"SELECT count(*) FROM ({left} LIMIT 1) AS left_over"
        self.reader = Reader(target)

    def __call__(self) -> int:
        return int(self.reader.one(self.sql)[0])

    def close(self) -> None:
        self.reader.close()


class Reader:
    """One connection to the target that reads a row at a time, outside any transaction:
    the bare driver for SQLite and PostgreSQL, SQLAlchemy for another server (MariaDB)."""

    def __init__(self, target: Target) -> None:
        if target.backend == "sqlite":
            conn = sqlite3.connect(target.location, isolation_level=None, timeout=30)
            self.one = lambda sql: tuple(conn.execute(sql).fetchone())
            self.close = conn.close
        elif target.backend == "postgresql":
            import psycopg

            # Nothing prepared: the target may be a transaction-mode pooler (R34).
            pg = psycopg.connect(target.libpq_dsn, autocommit=True, prepare_threshold=None)
            self.one = lambda sql: tuple(pg.execute(sql).fetchone() or ())
            self.close = pg.close
        else:
            import sqlalchemy as sa

            engine = sa.create_engine(target.url, isolation_level="AUTOCOMMIT")
            server = engine.connect()
            self.one = lambda sql: tuple(server.exec_driver_sql(sql).one())

            def close() -> None:
                server.close()
                engine.dispose()

            self.close = close


def measure(
    implementation: str,
    target: Target,
    processes: int,
    jobs: int,
    folder: Path,
    options: Sequence[str] = (),
) -> Run:
    """Start `processes` processes, open the gate once all have started, time the drain,
    then stop them as an operator would and check every job ran once. `options` follow
    the command (a benchmark about one of them; the others measure the defaults)."""
    gate_path = folder / f"gate-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        gate.GATE: str(gate_path),
        gate.DSN: app_dsn(implementation, target),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    log_path = gate_path.with_suffix(".log")
    spawned = time.perf_counter()
    with log_path.open("wb") as log:
        children = [
            subprocess.Popen(
                [*command(implementation, target), *options],
                env=env,
                cwd=folder,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            for _ in range(processes)
        ]
    remaining = Remaining(implementation, target)
    try:
        _wait_until(
            lambda: all(gate.ready_file(gate_path, c.pid).exists() for c in children),
            START_TIMEOUT_S,
            children,
            log_path,
            "start",
        )
        start_s = time.perf_counter() - spawned
        opened = time.perf_counter()
        gate_path.touch()
        _wait_until(lambda: remaining() == 0, RUN_TIMEOUT_S, children, log_path, "drain")
        seconds = time.perf_counter() - opened
    finally:
        remaining.close()
        _stop(children, stop_signal(implementation))
    return Run(
        jobs_per_s=jobs / seconds,
        seconds=seconds,
        start_s=start_s,
        exactly_once=ran_exactly_once(implementation, target, jobs),
    )


def _wait_until(
    condition: object, timeout: float, children: list[subprocess.Popen], log: Path, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        # A process that exits before the queue is empty (the library loop may, having
        # found it empty; a crashed worker must not) is only an error before the gate.
        if what == "start" and any(c.poll() is not None for c in children):
            raise RuntimeError(f"a process exited before the gate: {_tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not finish in {timeout:.0f} s: {_tail(log)}")
        time.sleep(POLL_S)


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _stop(children: list[subprocess.Popen], how: signal.Signals) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(how)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def ran_exactly_once(implementation: str, target: Target, jobs: int) -> bool:
    """queuecore: every job done on its first attempt. pgqueuer: one successful log entry
    per job. huey deletes a task as it dequeues it and keeps no record: an empty queue
    is all there is to check."""
    seed = SEEDS[implementation]
    if seed == HUEY:
        return True
    if seed == PGQUEUER:
        sql = (
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        )
        expected: tuple[int, ...] = (jobs, jobs)
    else:
        sql = (
            "SELECT count(*), sum(CASE WHEN state = 'done' AND attempts = 1 THEN 1 END) "
            "FROM queuecore_jobs"
        )
        expected = (jobs, jobs)
    reader = Reader(target)
    try:
        return reader.one(sql) == expected
    finally:
        reader.close()


def median(runs: list[Run]) -> float | None:
    return statistics.median(r.jobs_per_s for r in runs) if runs else None


@dataclass
class Row:
    """One backend and process count, every implementation's runs side by side."""

    backend: str
    processes: int
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def median(self, implementation: str) -> float | None:
        return median(self.runs.get(implementation, []))

    def start_s(self, implementation: str) -> float | None:
        runs = self.runs.get(implementation)
        return statistics.median(r.start_s for r in runs) if runs else None


def implementations(backend: str, peer_installed: bool) -> list[str]:
    chosen = [WORKER, WORKER_QUIET, WORKER_ASYNC, LOOP]
    return [*chosen, PEERS[backend]] if peer_installed else chosen


def run(
    dbs: Any,
    backends: list[str],
    processes: tuple[int, ...],
    jobs: int,
    repeats: int,
    installed: Callable[[str], bool],
    log: Callable[[str], None],
) -> list[Row]:
    """Every row once per repeat, every implementation of a row in turn (so a disturbance
    of the shared machine hits a row's columns alike)."""
    rows = [Row(backend, p) for backend in backends for p in processes]
    for repeat in range(repeats):
        for row in rows:
            peer_module = "huey" if row.backend == "sqlite" else "pgqueuer"
            for implementation in implementations(row.backend, installed(peer_module)):
                target = dbs.prepare(SEEDS[implementation], row.backend, "NORMAL", jobs)
                result = measure(implementation, target, row.processes, jobs, dbs.folder)
                dbs.discard(target)
                if not result.exactly_once:
                    raise RuntimeError(f"{implementation} did not run every job exactly once")
                row.runs.setdefault(implementation, []).append(result)
                log(
                    f"[{repeat + 1}/{repeats}] worker {row.backend} {row.processes}p "
                    f"{implementation}: {result.jobs_per_s:,.0f} jobs/s "
                    f"(start {result.start_s:.2f} s, not counted)"
                )
    return rows


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'backend':<10} {'procs':>5} {'worker':>8} {'no log':>8} {'async':>8} {'loop':>8} "
        f"{'peer':>22} {'w/loop':>6} {'w/peer':>6} {'a/w':>5} {'log cost':>8} {'start s':>7}"
    ]
    for row in rows:
        peer = PEERS[row.backend]
        worker = row.median(WORKER)
        quiet = row.median(WORKER_QUIET)
        cost = None if worker is None or not quiet else 1 - worker / quiet
        lines.append(
            f"{row.backend:<10} {row.processes:>5} {fmt(worker):>8} {fmt(quiet):>8} "
            f"{fmt(row.median(WORKER_ASYNC)):>8} "
            f"{fmt(row.median(LOOP)):>8} {peer + ' ' + fmt(row.median(peer)):>22} "
            f"{fmt(ratio(worker, row.median(LOOP)), '.2f'):>6} "
            f"{fmt(ratio(worker, row.median(peer)), '.2f'):>6} "
            f"{fmt(ratio(row.median(WORKER_ASYNC), worker), '.2f'):>5} "
            f"{fmt(cost, '.0%'):>8} {fmt(row.start_s(WORKER), '.2f'):>7}"
        )
    return lines


def targets(rows: list[Row], checks: list[Check]) -> None:
    """Issues 12 and 29's targets for the worker, on this run's medians."""
    for row in rows:
        where = f"worker {row.backend} {row.processes}p"
        worker = row.median(WORKER)
        check(
            checks,
            f"{where}: queuecore worker >= 0.7x library loop",
            ratio(worker, row.median(LOOP)),
            0.7,
        )
        check(
            checks,
            f"{where}: async handler >= 0.8x sync handler",
            ratio(row.median(WORKER_ASYNC), worker),
            0.8,
        )
        peer = PEERS[row.backend]
        bound = PEER_BOUNDS[row.backend].get(row.processes)
        if bound is not None:
            check(
                checks,
                f"{where}: queuecore worker >= {bound}x {peer}",
                ratio(worker, row.median(peer)),
                bound,
            )


def keep(
    rates: dict[Any, list[float]], key: Any, run: Run, label: str, repeat: int, repeats: int
) -> None:
    """One round's drain into `rates[key]`, said as it ends; a job run twice ends the
    benchmark, since its rate would count work that was not the job's."""
    if not run.exactly_once:
        raise SystemExit(f"{label}: a job ran twice")
    rates.setdefault(key, []).append(run.jobs_per_s)
    print(f"[{repeat + 1}/{repeats}] {label}: {run.jobs_per_s:,.0f} jobs/s", flush=True)
