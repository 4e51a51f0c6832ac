"""Schedulers on a real database, both backends, driven by the queue's fake clock (R20):
racing schedulers make one job per tick, missed ticks run once (or never), a schedule
removed from the code stops, and a compressed hour runs every tick exactly once."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.schedules import Schedule, Scheduler
from queuecore.schema import jobs
from queuecore.testing import drain
from tests.conformance.conftest import FakeClock


def periodic_rows(dsn: str) -> list[tuple[str, str, int]]:
    """(dedupe key, state, attempts) of every periodic job, oldest tick first."""
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(jobs.c.dedupe_key, jobs.c.state, jobs.c.attempts)
                .where(jobs.c.dedupe_key.like("periodic:%"))
                .order_by(jobs.c.visible_at, jobs.c.id)
            ).all()
    finally:
        engine.dispose()
    return [tuple(row) for row in rows]


def keys_of(dsn: str, name: str) -> list[str]:
    return [key for key, _, _ in periodic_rows(dsn) if key.startswith(f"periodic:{name}:")]


def test_queue_now_reads_the_queues_clock(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock
) -> None:
    assert make_queue().now() == clock.now
    clock.advance(2.5)
    assert make_queue().now() == clock.now
    # Without a fake clock: the local clock on SQLite, the server's on PostgreSQL (the
    # same machine here, so the two agree to within the test's own run time).
    before = time.time()
    server = make_queue(clock=None).now()
    assert before - 60 < server < time.time() + 60


def test_racing_schedulers_make_one_job_per_tick(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock, dsn: str
) -> None:
    schedule = Schedule("* * * * * *", "tick", name="race")
    schedulers = [Scheduler(make_queue(), [schedule]) for _ in range(3)]
    failures: list[BaseException] = []
    for step in range(21):
        clock.advance(1 if step else 0)  # the workers' first look, then one a tick
        barrier = threading.Barrier(len(schedulers))

        def look(scheduler: Scheduler, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                scheduler.look()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=look, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
    keys = keys_of(dsn, "race")
    assert len(keys) == len(set(keys)) == 21  # the latest tick at the first look, then 20
    start = math.floor(clock.now) - 20
    assert keys == [schedule.dedupe_key(start + i) for i in range(21)]


@pytest.mark.parametrize(("missed", "runs_for_the_gap"), [("latest", 1), ("skip", 0)])
def test_a_downtime_of_several_ticks_runs_one_or_none(
    make_queue: Callable[..., queuecore.Queue],
    clock: FakeClock,
    dsn: str,
    missed: str,
    runs_for_the_gap: int,
) -> None:
    schedule = Schedule("* * * * *", "report", missed=missed, name="minutely")
    clock.now = 1_700_000_030.0  # 30 s into a minute
    scheduler = Scheduler(make_queue(), [schedule])
    scheduler.look()
    for _ in range(3):
        clock.advance(60)
        scheduler.look()
    before = len(keys_of(dsn, "minutely"))
    clock.advance(10 * 60)  # every worker stopped: ten ticks come due unseen
    Scheduler(make_queue(), [schedule]).look()  # the first worker back
    gap = keys_of(dsn, "minutely")[before:]
    assert len(gap) == runs_for_the_gap
    if runs_for_the_gap:
        assert gap == [schedule.dedupe_key(schedule.latest_at(clock.now))]


def test_a_schedule_removed_from_the_code_stops(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock, dsn: str
) -> None:
    kept = Schedule("* * * * * *", "tick", name="kept")
    removed = Schedule("* * * * * *", "tick", name="removed")
    old = Scheduler(make_queue(), [kept, removed])
    for _ in range(3):
        clock.advance(1)
        old.look()
    deployed = Scheduler(make_queue(), [kept])  # the new code, on every worker
    for _ in range(3):
        clock.advance(1)
        deployed.look()
    assert len(keys_of(dsn, "kept")) == 6
    assert len(keys_of(dsn, "removed")) == 3  # none since the deploy


def test_a_compressed_hour_runs_every_tick_exactly_once(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock, dsn: str, backend: str
) -> None:
    """Three workers' schedulers look at random moments (each skips some looks) while the
    fake clock runs through one hour in uneven steps; jobs are drained as they come."""
    schedules = [
        Schedule("* * * * * *", "tick", name="second"),
        Schedule("* * * * *", "tick", name="minute"),
        Schedule("*/5 * * * *", "tick", name="five-minutes"),
    ]
    schedulers = [Scheduler(make_queue(), schedules) for _ in range(3)]
    runner = make_queue()
    runs: Counter[int] = Counter()

    def tick(job: queuecore.Job) -> None:
        runs[job.id] += 1

    rng = random.Random(15)
    start = clock.now
    for scheduler in schedulers:  # every worker starts and looks once
        scheduler.look()
    last_drain = start
    while clock.now < start + 3600:
        clock.advance(min(rng.uniform(0.2, 1.6), start + 3600 - clock.now))
        for scheduler in schedulers:
            if rng.random() < 0.6:
                scheduler.look()
        if clock.now - last_drain >= 60:
            drain(runner, {"tick": tick})
            last_drain = clock.now
    for scheduler in schedulers:  # the hour's last tick is seen before the count
        scheduler.look()
    drain(runner, {"tick": tick})

    rows = periodic_rows(dsn)
    assert all(state == "done" and attempts == 1 for _, state, attempts in rows)
    assert sum(runs.values()) == len(runs) == len(rows)  # each job's handler ran once
    figures = []
    for schedule in schedules:
        period = {"second": 1, "minute": 60, "five-minutes": 300}[schedule.name]
        # Computed without cron: the latest tick before the start (a worker's first
        # look), then every multiple of the period in the hour.
        first = start - start % period
        expected = [first + i * period for i in range(int((start + 3600 - first) // period) + 1)]
        ran = keys_of(dsn, schedule.name)
        assert ran == [schedule.dedupe_key(t) for t in expected]
        figures.append(f"{schedule.name}: expected {len(expected)}, ran {len(ran)}")
    print(f"\ncompressed hour on {backend}: " + "; ".join(figures))
