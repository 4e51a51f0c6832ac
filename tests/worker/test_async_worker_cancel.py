"""W9 on the in-process `AsyncWorker`, on every backend and the real clock: a job
claimed ahead and then cancelled never starts, and a running handler hears a cancel
within about a second, long before its next heartbeat. The worker-process twin is
tests/worker/test_cancel_stops.py.

The handlers record their starts in a list of their own, not in the queue's tables. No
duration is asserted tighter than many seconds of slack: the lease is 300 s (a
heartbeat every 100 s), so a prompt `lost` can only be the worker's cancel poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import queuecore
from queuecore import AsyncWorker, current_lease
from tests.faults.helpers import PATIENCE

LEASE = 300.0


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait (without blocking the loop) until `condition`, read on a thread, holds."""
    deadline = time.monotonic() + PATIENCE
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"gave up after {PATIENCE}s waiting until {what}"
        await asyncio.sleep(0.02)


def beside_a_worker(
    dsn: str,
    handlers: dict[str, Any],
    body: Callable[[], Coroutine[Any, Any, None]],
    **options: Any,
) -> None:
    """Run `body` while an AsyncWorker (one task, 300 s lease) runs, then stop it."""

    async def scenario() -> None:
        async with queuecore.connect_async(dsn, lease_seconds=LEASE) as aqueue:
            worker = AsyncWorker(aqueue, handlers, concurrency=1, poll_interval=0.05, **options)
            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                await body()
            finally:
                await asyncio.sleep(0)
                worker.stop()
                await asyncio.wait_for(running, PATIENCE)

    asyncio.run(scenario())


def test_w9_async_jobs_claimed_ahead_and_cancelled_never_start(dsn):
    """One task runs a long job; the four claimed ahead with it (`prefetch=4`) are
    cancelled while it runs. None of them starts; the job after them does."""
    started: list[int] = []
    release = asyncio.Event()

    async def long(job: queuecore.Job) -> None:
        started.append(job.id)
        await asyncio.wait_for(release.wait(), PATIENCE)

    async def short(job: queuecore.Job) -> None:
        started.append(job.id)

    with queuecore.connect(dsn) as queue:
        long_id = queue.enqueue("long", {}).id
        ahead = [queue.enqueue("short", {}, priority=1).id for _ in range(4)]

        async def body() -> None:
            await until(lambda: started == [long_id], "the long job starts")
            # One claim took all five: the four wait in the worker behind the long job,
            # and show as held ahead once the long one is noted as started (W9).
            assert [queue.get(i).state for i in ahead] == ["running"] * 4
            await until(lambda: queue.get(long_id).started_at, "the long job is noted")
            assert [queue.get(i).started_at for i in ahead] == [None] * 4
            assert queue.stats()["held_ahead"] == 4
            assert all([queue.cancel(i) for i in ahead])
            await asyncio.sleep(0.1)  # older than a fresh claim: each is read again
            release.set()
            after = queue.enqueue("short", {}).id
            await until(lambda: queue.get(after).state == "done", "the job after them is done")

        beside_a_worker(dsn, {"long": long, "short": short}, body, prefetch=4)
        assert started[0] == long_id and len(started) == 2, started
        assert [queue.get(i).state for i in ahead] == ["cancelled"] * 4
        assert queue.get(long_id).state == "done"


def test_w9_a_running_async_handler_hears_a_cancel_within_seconds(dsn):
    """The handler awaits `current_lease().lost_async`; with a 300 s lease, hearing the
    cancel within 20 s can only be the cancel poll (about CANCEL_POLL, printed)."""
    seen: list[float] = []
    began: list[int] = []

    async def watch(job: queuecore.Job) -> None:
        began.append(job.id)
        await asyncio.wait_for(current_lease().lost_async.wait(), PATIENCE)  # type: ignore[attr-defined]
        seen.append(time.monotonic())

    with queuecore.connect(dsn) as queue:
        job_id = queue.enqueue("watch", {}).id

        async def body() -> None:
            # Not the row's "running": a job cancelled between its claim and its start
            # is let go unstarted, and no handler would hear of it. The handler awaits
            # `lost_async` as soon as it has said it began: the test's wait yields to it.
            await until(lambda: began, "the handler begins")
            cancelled_at = time.monotonic()
            assert queue.cancel(job_id)
            await until(lambda: seen, "the handler hears the cancel")
            heard_after = seen[0] - cancelled_at
            print(f"an async handler heard its cancel after {heard_after:.3f} s")
            assert heard_after < 20, heard_after

        beside_a_worker(dsn, {"watch": watch}, body)
        assert queue.get(job_id).state == "cancelled"
