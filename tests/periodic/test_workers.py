"""Three real worker processes running one registry with a one-second schedule, on both
backends: no leader, yet each tick runs exactly once; a downtime of several ticks runs one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.periodic.helpers import (
    cli_worker,
    clocked_worker,
    done_ticks,
    logs_text,
    periodic_rows,
    stop,
    wait_for,
    workers,
)

REGISTRY = "tests.periodic.jobs:REGISTRY"


def test_three_workers_run_each_tick_exactly_once(dsn: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with workers(3, lambda _: cli_worker(REGISTRY, dsn), logs) as procs:
        wait_for(lambda: len(done_ticks(dsn, "every-second")) >= 8, procs, logs)
        stopping_at = time.time()
        stop(procs, logs)
    rows = periodic_rows(dsn, "every-second")
    ticks = [tick for tick, _, _ in rows]
    assert ticks == [ticks[0] + i for i in range(len(ticks))], "a tick was skipped"
    settled = [(state, attempts) for tick, state, attempts in rows if tick < stopping_at - 5]
    assert len(settled) >= 1
    assert set(settled) == {("done", 1)}, rows  # each ran once: attempts count every run
    assert {state for _, state, _ in rows} <= {"done", "queued"}
    # Each job was created by exactly one of the racing workers (the others got its id).
    enqueued = [log.read_text().count("enqueued as job") for log in sorted(logs.glob("*.log"))]
    assert sum(enqueued) == len(rows), logs_text(logs)
    print(f"\n{len(rows)} ticks, enqueued by the three workers: {enqueued}")


def set_clock(path: Path, now: float) -> None:
    """Written whole, then renamed: a worker never reads half a number."""
    part = path.with_suffix(".part")
    part.write_text(repr(now))
    os.replace(part, path)


def test_a_downtime_of_several_ticks_runs_one(dsn: str, tmp_path: Path) -> None:
    clock_file = tmp_path / "clock"
    start = 1_700_000_000.0
    set_clock(clock_file, start + 0.5)

    def ticked(tick: float) -> bool:
        return tick in done_ticks(dsn, "every-second")

    before, after = tmp_path / "before", tmp_path / "after"
    with workers(3, lambda _: clocked_worker(dsn, clock_file), before) as procs:
        wait_for(lambda: ticked(start), procs, before)
        for second in range(1, 4):
            set_clock(clock_file, start + second + 0.5)
            wait_for(lambda second=second: ticked(start + second), procs, before)
        stop(procs, before)

    set_clock(clock_file, start + 9.5)  # six ticks (4 to 9) come due with no worker up

    with workers(3, lambda _: clocked_worker(dsn, clock_file), after) as procs:
        wait_for(lambda: ticked(start + 9), procs, after)
        set_clock(clock_file, start + 10.5)
        wait_for(lambda: ticked(start + 10), procs, after)
        stop(procs, after)

    rows = periodic_rows(dsn, "every-second")
    assert [tick - start for tick, _, _ in rows] == [0, 1, 2, 3, 9, 10], logs_text(after)
    assert {(state, attempts) for _, state, attempts in rows} == {("done", 1)}
    # The nightly schedule (missed="skip") was 20 hours late at the fake time: not run.
    assert periodic_rows(dsn, "nightly") == []
