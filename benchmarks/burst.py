"""The burst family of `python -m benchmarks.run` (PostgreSQL): a backlog that arrives
in a table whose statistics predate it.

A new application's first burst lands in a table PostgreSQL has never analyzed; its
planner then guesses the ready index holds a handful of rows and sorts every ready row
for each claim, until the statistics are brought up to date. queuecore notices and has
the table analyzed (`queuecore.core.statistics`); this family keeps that measured.

The same `queuecore worker` processes, every option at its default, drain BURST jobs
twice in turn: from a table analyzed after the seed (as autovacuum would long ago have
done), and from a new table never analyzed, with autovacuum off for it, so what is
measured is queuecore's own answer, not when autovacuum's round happens to fall. The
cost of a sorting claim grows with the backlog, so the burst is larger than the worker
family's queue: at 10,000 jobs one process hardly shows it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks import throughput, worker_e2e
from benchmarks.checks import Check, check, fmt, ratio
from benchmarks.implementations import QUEUECORE

ANALYZED = "analyzed"
UNANALYZED = "never analyzed"
#: Measured side by side (50,000 jobs, 1 and 4 processes): with the claim's look the
#: never-analyzed drain ran at 0.83 to 0.93 of the analyzed one; with the look disabled
#: by hand, at 0.44 and 0.54.
BOUND = 0.8


@dataclass
class Results:
    """Every burst drain of one run: (processes, ANALYZED or UNANALYZED) -> jobs/s."""

    processes: tuple[int, ...]
    jobs: int
    rates: dict[tuple[int, str], list[float]] = field(default_factory=dict)

    def median(self, processes: int, table: str) -> float | None:
        rates = self.rates.get((processes, table))
        return statistics.median(rates) if rates else None


def run(
    dbs: throughput.Databases,
    processes: tuple[int, ...],
    jobs: int,
    repeats: int,
    log: Callable[[str], None],
) -> Results:
    """Every process count once per repeat, the analyzed drain and then the other."""
    results = Results(processes, jobs)
    for repeat in range(repeats):
        for count in processes:
            for table in (ANALYZED, UNANALYZED):
                target = (
                    dbs.prepare(QUEUECORE, "postgresql", "NORMAL", jobs)
                    if table == ANALYZED
                    else dbs.prepare_unanalyzed(jobs)
                )
                drained = worker_e2e.measure(worker_e2e.WORKER, target, count, jobs, dbs.folder)
                if not drained.exactly_once:
                    raise RuntimeError(f"a burst into a table {table} ran a job twice")
                results.rates.setdefault((count, table), []).append(drained.jobs_per_s)
                log(
                    f"[{repeat + 1}/{repeats}] burst postgresql {count}p {table}: "
                    f"{drained.jobs_per_s:,.0f} jobs/s"
                )
    return results


def table(results: Results) -> list[str]:
    lines = [
        f"PostgreSQL burst: {results.jobs:,} no-op jobs, `queuecore worker` with defaults (jobs/s)",
        f"{'procs':>5} {ANALYZED:>10} {UNANALYZED:>15} {'ratio':>6}",
    ]
    for count in results.processes:
        analyzed, fresh = results.median(count, ANALYZED), results.median(count, UNANALYZED)
        lines.append(
            f"{count:>5} {fmt(analyzed):>10} {fmt(fresh):>15} "
            f"{fmt(ratio(fresh, analyzed), '.2f'):>6}"
        )
    return lines


def targets(results: Results | None, checks: list[Check]) -> None:
    """A burst into a table never analyzed drains nearly as fast as into an analyzed one."""
    if results is None:
        return
    for count in results.processes:
        check(
            checks,
            f"burst postgresql {count}p: never analyzed >= {BOUND}x analyzed",
            ratio(results.median(count, UNANALYZED), results.median(count, ANALYZED)),
            BOUND,
        )


def as_json(results: Results) -> dict[str, Any]:
    return {
        "jobs": results.jobs,
        "drains": [
            {"processes": p, "table": t, "jobs_per_s": rates}
            for (p, t), rates in results.rates.items()
        ],
    }
