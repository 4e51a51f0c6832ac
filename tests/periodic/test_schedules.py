"""Schedulers on a real database, both backends, driven by the queue's fake clock (R20):
racing schedulers make one job per tick, missed ticks run once (or never), a schedule
removed from the code stops, and a compressed quarter hour runs every tick exactly once."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

import queuecore
from queuecore.conformance.fixtures import FakeClock
from queuecore.core.schedules import Schedule
from queuecore.testing import drain
from queuecore.worker.scheduler import Scheduler
from tests.periodic.helpers import periodic_rows


def ticks_of(dsn: str, name: str) -> list[float]:
    """The ticks of schedule `name` that have a job, oldest first (read from the keys)."""
    return [tick for tick, _, _ in periodic_rows(dsn, name)]


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
    ticks = ticks_of(dsn, "race")
    start = math.floor(clock.now) - 20  # the latest tick at the first look, then 20
    assert ticks == [start + i for i in range(21)]


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
    before = len(ticks_of(dsn, "minutely"))
    clock.advance(10 * 60)  # every worker stopped: ten ticks come due unseen
    Scheduler(make_queue(), [schedule]).look()  # the first worker back
    gap = ticks_of(dsn, "minutely")[before:]
    assert len(gap) == runs_for_the_gap
    if runs_for_the_gap:
        assert gap == [schedule.latest_at(clock.now)]


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
    assert len(ticks_of(dsn, "kept")) == 6
    assert len(ticks_of(dsn, "removed")) == 3  # none since the deploy


#: A quarter of an hour: 900 second ticks, 15 minute ticks and 3 or 4 five-minute ticks,
#: so each schedule's period turns over several times. A whole hour cost four times as
#: long (27 s on MariaDB, each look a few round trips) and met no case this does not.
COMPRESSED = 15 * 60


@pytest.mark.slow
def test_a_compressed_quarter_hour_runs_every_tick_exactly_once(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock, dsn: str, backend: str
) -> None:
    """Three workers' schedulers look at random moments (each skips some looks) while the
    fake clock runs through a quarter of an hour in uneven steps; jobs are drained as they
    come."""
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
    while clock.now < start + COMPRESSED:
        clock.advance(min(rng.uniform(0.2, 1.6), start + COMPRESSED - clock.now))
        for scheduler in schedulers:
            if rng.random() < 0.6:
                scheduler.look()
        if clock.now - last_drain >= 60:
            drain(runner, {"tick": tick})
            last_drain = clock.now
    for scheduler in schedulers:  # the last tick is seen before the count
        scheduler.look()
    drain(runner, {"tick": tick})

    rows = [row for s in schedules for row in periodic_rows(dsn, s.name)]
    assert {(state, attempts) for _, state, attempts in rows} == {("done", 1)}
    assert sum(runs.values()) == len(runs) == len(rows)  # each job's handler ran once
    figures = []
    for schedule in schedules:
        period = {"second": 1, "minute": 60, "five-minutes": 300}[schedule.name]
        # Computed without cron: the latest tick before the start (a worker's first
        # look), then every multiple of the period until the end.
        first = start - start % period
        count = int((start + COMPRESSED - first) // period) + 1
        expected = [first + i * period for i in range(count)]
        ran = ticks_of(dsn, schedule.name)
        assert ran == expected
        figures.append(f"{schedule.name}: expected {len(expected)}, ran {len(ran)}")
    print(f"\ncompressed quarter hour on {backend}: " + "; ".join(figures))


def test_a_scheduler_thread_looks_until_stopped_and_rides_out_a_failing_look(
    make_queue: Callable[..., queuecore.Queue],
    clock: FakeClock,
    dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="queuecore.schedules")
    queue = make_queue()
    failures = iter([RuntimeError("database away"), RuntimeError("still away")])

    class Flaky:
        """The queue, except that its first two looks at the clock fail."""

        def now(self) -> float:
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return queue.now()

        def __getattr__(self, name: str) -> object:
            return getattr(queue, name)

    stop = threading.Event()
    scheduler = Scheduler(Flaky(), [Schedule("* * * * * *", "tick", name="thread")])  # type: ignore[arg-type]
    thread = threading.Thread(target=scheduler.run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not ticks_of(dsn, "thread"):
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert ticks_of(dsn, "thread") == [clock.now]
    warnings = [r.getMessage() for r in caplog.records if r.name == "queuecore.schedules"]
    assert [w for w in warnings if "cannot enqueue" in w] == [
        "cannot enqueue periodic jobs (database away); trying again"
    ]
    assert "periodic jobs are enqueued again" in warnings


def test_a_tick_enqueued_under_an_old_payload_is_not_enqueued_again(
    make_queue: Callable[..., queuecore.Queue], clock: FakeClock, dsn: str
) -> None:
    """A schedule kept by its name through a deploy that changed its payload: a worker on
    the new code meets the tick an old worker enqueued (R27's conflict) and goes on with
    its other schedules, instead of failing its whole look."""
    old = Schedule("* * * * * *", "tick", payload={"v": 1}, name="kept")
    new = Schedule("* * * * * *", "tick", payload={"v": 2}, name="kept")
    other = Schedule("* * * * * *", "tick", name="other")
    Scheduler(make_queue(), [old]).look()
    Scheduler(make_queue(), [new, other]).look()  # the same instant: the same tick
    assert len(ticks_of(dsn, "kept")) == 1
    assert len(ticks_of(dsn, "other")) == 1
    clock.advance(1)
    Scheduler(make_queue(), [new, other]).look()
    assert len(ticks_of(dsn, "kept")) == 2
