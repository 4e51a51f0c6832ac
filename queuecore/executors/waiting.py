"""`wait()` (R26) without spinning: look at the job, and between two looks sleep on a
signal that a backend may wake early when the job finishes (PostgreSQL: a NOTIFY sent by
a trigger, only for jobs somebody waits for). The pause grows between looks, so a long
wait costs a handful of reads, and a lost notification only delays the answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager

from queuecore.contract import AsyncFinishSignal, FinishSignal
from queuecore.job import JobSnapshot

FIRST_PAUSE = 0.01
GROWTH = 1.5


class Sleep:
    """The signal of a database that cannot notify: a plain sleep, so `wait()` polls."""

    def __enter__(self) -> Sleep:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def wait_until_finished(
    look: Callable[[], JobSnapshot | None],
    signal: Callable[[], AbstractContextManager[FinishSignal]],
    *,
    timeout: float,
    pause_cap: float,
) -> JobSnapshot | None:
    """The job once finished, or as it is at the timeout; None once it is unknown. The
    signal is set up before the first look, so a job that finishes between the look and
    the sleep still wakes the sleeper."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    with signal() as finish:
        while True:
            snapshot = look()
            if snapshot is None or snapshot.finished:
                return snapshot
            left = deadline - time.monotonic()
            if left <= 0:
                return snapshot
            finish.sleep(min(pause, left))
            pause = min(pause * GROWTH, pause_cap)


class AsyncSleep:
    """`Sleep` for the async queue: the event loop runs on while it waits."""

    async def __aenter__(self) -> AsyncSleep:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def wait_until_finished_async(
    look: Callable[[], Awaitable[JobSnapshot | None]],
    signal: Callable[[], AbstractAsyncContextManager[AsyncFinishSignal]],
    *,
    timeout: float,
    pause_cap: float,
) -> JobSnapshot | None:
    """`wait_until_finished`, awaited: the same looks at the same growing pauses."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    async with signal() as finish:
        while True:
            snapshot = await look()
            if snapshot is None or snapshot.finished:
                return snapshot
            left = deadline - time.monotonic()
            if left <= 0:
                return snapshot
            await finish.sleep(min(pause, left))
            pause = min(pause * GROWTH, pause_cap)
