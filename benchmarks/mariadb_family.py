"""The MariaDB family of `python -m benchmarks.run` (issue 29's MariaDB targets), on the
server `--mariadb-dsn` names (by default the local one the test suite uses):

- whole workers: `queuecore worker` processes with every default, and queuecore's best
  library loop in the same harness (`worker_e2e.measure`), draining N no-op jobs from a
  scratch database each (`mariadb_worker.drain`), with 1, 2 and 4 processes;
- the library loop against its floor: one connection claiming one job and completing
  it, through queuecore and by hand on its driver (mysqlclient where installed), with
  the same rules on the same table (`mariadb_drivers`).

No job queue of Python's runs on MariaDB, so there is no peer column: the worker is
measured against its own loop, four processes against one, and the loop against the
floor. A server that cannot be reached leaves the rows empty, and their targets missed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks import mariadb_drivers, mariadb_worker
from benchmarks.checks import Check, check, fmt, ratio
from benchmarks.worker_e2e import LOOP, WORKER

#: Jobs per round of the one-connection loops: each waits for the server's commits.
FLOOR_JOBS = 1000
QUEUECORE_LOOP = "queuecore"
FLOOR = "floor"


@dataclass
class Results:
    """Every MariaDB measurement of one run, by what was measured."""

    processes: tuple[int, ...]
    #: (processes, WORKER or LOOP) -> jobs/s of each repeat
    workers: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    #: QUEUECORE_LOOP or FLOOR -> jobs/s of each round
    loops: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None

    def worker(self, processes: int, implementation: str) -> float | None:
        rates = self.workers.get((processes, implementation))
        return statistics.median(rates) if rates else None

    def loop(self, name: str) -> float | None:
        rates = self.loops.get(name)
        return statistics.median(rates) if rates else None


def run(
    dsn: str,
    processes: tuple[int, ...],
    jobs: int,
    repeats: int,
    folder: Path,
    log: Callable[[str], None],
) -> Results:
    """Every row once per repeat, its implementations in turn; then the loops, rounds
    interleaved. A server out of reach is said once and leaves everything unmeasured."""
    results = Results(processes)
    try:
        for repeat in range(repeats):
            for count in processes:
                for implementation in (WORKER, LOOP):
                    run_ = mariadb_worker.drain(
                        "mariadb", implementation, count, jobs, folder, server=dsn
                    )
                    if not run_.exactly_once:
                        raise RuntimeError(f"{implementation} on MariaDB ran a job twice")
                    results.workers.setdefault((count, implementation), []).append(run_.jobs_per_s)
                    log(
                        f"[{repeat + 1}/{repeats}] worker mariadb {count}p {implementation}: "
                        f"{run_.jobs_per_s:,.0f} jobs/s"
                    )
        rates = mariadb_drivers.loop_and_floor(urlsplit(dsn), FLOOR_JOBS, repeats)
        results.loops.update(rates)
        for name, measured in rates.items():
            log(f"mariadb loop {name}: " + ", ".join(f"{r:,.0f}" for r in measured) + " jobs/s")
    except Exception as exc:  # no server here: the rows stay empty, their targets missed
        results.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log(f"MariaDB not measured ({results.error})")
    return results


def table(results: Results, jobs: int) -> list[str]:
    lines = [
        f"MariaDB, whole workers: {jobs:,} no-op jobs, default options (jobs/s)",
        f"{'procs':>5} {'worker':>8} {'loop':>8} {'w/loop':>6} {'vs 1p':>6}",
    ]
    single = results.worker(1, WORKER)
    for count in results.processes:
        worker = results.worker(count, WORKER)
        lines.append(
            f"{count:>5} {fmt(worker):>8} {fmt(results.worker(count, LOOP)):>8} "
            f"{fmt(ratio(worker, results.worker(count, LOOP)), '.2f'):>6} "
            f"{fmt(ratio(worker, single), '.2f'):>6}"
        )
    floor = results.loop(FLOOR)
    lines += [
        f"MariaDB, one connection claiming one job and completing it, {FLOOR_JOBS:,} jobs:",
        f"  queuecore {fmt(results.loop(QUEUECORE_LOOP))} jobs/s, the floor on its driver "
        f"{fmt(floor)}: {fmt(ratio(results.loop(QUEUECORE_LOOP), floor), '.2f')}x",
    ]
    if results.error:
        lines.append(f"  not measured: {results.error}")
    return lines


def targets(results: Results | None, checks: list[Check]) -> None:
    """Issue 29's MariaDB targets, on this run's medians."""
    if results is None:
        return
    for count in results.processes:
        check(
            checks,
            f"worker mariadb {count}p: queuecore worker >= 0.7x library loop",
            ratio(results.worker(count, WORKER), results.worker(count, LOOP)),
            0.7,
        )
    if 1 in results.processes and 4 in results.processes:
        check(
            checks,
            "worker mariadb: 4 processes >= 1.5x 1 process",
            ratio(results.worker(4, WORKER), results.worker(1, WORKER)),
            1.5,
        )
    check(
        checks,
        "mariadb loop x1: queuecore >= 0.8x mysqlclient floor",
        ratio(results.loop(QUEUECORE_LOOP), results.loop(FLOOR)),
        0.8,
    )


def as_json(results: Results) -> dict[str, Any]:
    return {
        "workers": [
            {"processes": p, "implementation": i, "jobs_per_s": rates}
            for (p, i), rates in results.workers.items()
        ],
        "loops": results.loops,
        "error": results.error,
    }
