"""The async worker's reporter and ack window (the twins of `queuecore.worker.reporter` and
`queuecore.worker.acks` on an event loop): what became of each job is told to the queue, and
completions wait a moment to share one `complete_many` transaction.

The rules are the sync worker's, and so are their reasons (see those modules): a report
is repeated until the database takes it, since an outage is never the job's failure and
the fence makes a repeat safe; only a second stop (`hurry`) ends that wait. A batch that
never committed leaves its jobs to their leases; an effect that raised fails only its
own job. The log lines and the batch's options are the sync worker's own functions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from queuecore.executors.reconnect import connection_lost, report_later
from queuecore.handling import Raised, Returned
from queuecore.job import Completions
from queuecore.observe.observer import WorkerObserver, why_refused_async
from queuecore.observe.worklog import describe, label, log
from queuecore.worker.acks import RETRY_PAUSE, Ack, complete_many_options
from queuecore.worker.async_handling import AsyncLease
from queuecore.worker.async_roles import AsyncHoldings, wait_for
from queuecore.worker.reporter import (
    FIRST_PAUSE,
    log_completion,
    log_failure,
    say_failure_unreported,
    say_not_committed,
    say_unreachable,
)

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

T = TypeVar("T")


class AsyncReporter:
    def __init__(
        self,
        queue: AsyncQueue,
        holdings: AsyncHoldings,
        *,
        ack_batch: int,
        ack_seconds: float,
        longest_pause: float,
        hurry: asyncio.Event,
        observer: WorkerObserver,
    ) -> None:
        self.queue = queue
        self.holdings = holdings
        self.longest_pause = longest_pause
        self.hurry = hurry
        self.observer = observer
        self.window_size = ack_batch if ack_batch > 1 and ack_seconds > 0 else 1
        self.window_wait = ack_seconds
        self._waiting: list[Ack] = []
        self._changed = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.window_size > 1:
            self._flusher = asyncio.create_task(self._flush_until_closed())

    async def close(self) -> None:
        """The finished jobs' completions commit before the exit."""
        self._closing = True
        self._changed.set()
        if self._flusher is not None:
            await self._flusher

    def describe(self) -> str:
        if self.window_size == 1:
            return "each job completed at once"
        return f"acks in batches of up to {self.window_size} or {self.window_wait * 1000:g} ms"

    async def report(self, lease: AsyncLease, outcome: Returned | Raised, started: float) -> None:
        """Tell the queue what became of the job, then let go of it, unless its
        completion went to the ack window, which lets go of it once flushed."""
        windowed = False
        try:
            if isinstance(outcome, Raised):
                await self._fail(lease, outcome, started)
            elif self.window_size > 1 and not self._closing:
                self.holdings.to_window()  # the task is free: claim its next job now
                self._waiting.append(Ack(lease, outcome.effect, started, result=outcome.result))
                if len(self._waiting) in (1, self.window_size):
                    self._changed.set()
                windowed = True
            else:
                await self._complete(lease, outcome, started)
        finally:
            if not windowed:
                self.holdings.let_go(lease)

    async def release(self, lease: AsyncLease) -> None:
        """Give back a job claimed but never started, its attempt uncounted (R14)."""
        try:
            released = await self.queue.release(lease.job)
        except Exception as exc:
            if not connection_lost(exc):  # an outage is the queue's to log, once
                log.warning(
                    "%s not released (%s); its lease will hand it on", label(lease), describe(exc)
                )
        else:
            if released:
                log.info("%s released unstarted", label(lease))
        self.holdings.let_go(lease)

    async def until_reachable(self, report: Callable[[], Awaitable[T]]) -> T:
        pause = FIRST_PAUSE
        while True:
            try:
                return await report()
            except Exception as exc:
                if not report_later(exc) or self.hurry.is_set():
                    raise
            await wait_for(self.hurry, pause)
            pause = min(pause * 2, self.longest_pause)

    async def _complete(self, lease: AsyncLease, returned: Returned, started: float) -> None:
        lease.reporting = True
        effect, result = returned.effect, returned.result
        try:
            done = await self.until_reachable(
                lambda: self.queue.complete(lease.job, effect=effect, result=result)
            )
        except Exception as exc:  # the effect raised (rolled back), or the database did
            if report_later(exc):  # given up on a second stop signal
                say_unreachable(lease)
                return
            await self._fail(lease, Raised.from_exception(exc), started)
            return
        said = "done" if done else await why_refused_async(self.queue, lease.job)
        log_completion(self.observer, lease, said, started)

    async def _fail(self, lease: AsyncLease, raised: Raised, started: float) -> None:
        lease.reporting = True
        text = raised.error
        try:
            outcome = await self.until_reachable(
                lambda: self.queue.fail(
                    lease.job, text, retry_in=raised.retry_in, permanent=raised.permanent
                )
            )
        except Exception as exc:
            say_failure_unreported(lease, text, exc)
            return
        refused = await why_refused_async(self.queue, lease.job) if outcome is None else None
        log_failure(self.observer, lease, outcome, text, started, refused)

    # --- the ack window ------------------------------------------------------------------

    async def _flush_until_closed(self) -> None:
        while True:
            batch = await self._next_batch()
            if not batch:
                return
            await self._flush(batch)

    async def _next_batch(self) -> list[Ack]:
        """A batch once `size` wait, the oldest waited `max_wait`, or closing; empty only
        when closed and drained."""
        while True:
            self._changed.clear()
            if self._waiting:
                due = self._waiting[0].since + self.window_wait - time.monotonic()
                if self._closing or len(self._waiting) >= self.window_size or due <= 0:
                    batch = self._waiting[: self.window_size]
                    del self._waiting[: self.window_size]
                    return batch
                await wait_for(self._changed, due)
            elif self._closing:
                return []
            else:
                await self._changed.wait()

    async def _flush(self, batch: list[Ack]) -> None:
        for ack in batch:
            ack.lease.reporting = True  # a heartbeat that now finds it done is no loss
        jobs = [ack.lease.job for ack in batch]
        options = complete_many_options(
            [ack.effect for ack in batch], [ack.result for ack in batch]
        )
        outcome: Completions | Exception
        try:
            outcome = await self.until_reachable(lambda: self.queue.complete_many(jobs, **options))
        except Exception as error:
            if connection_lost(error):  # a stop gave up on the outage
                outcome = error
            else:
                log.warning("completing %d job(s) failed (%s); trying once more", len(batch), error)
                await asyncio.sleep(RETRY_PAUSE)
                try:
                    outcome = await self.queue.complete_many(jobs, **options)
                except Exception as again:
                    outcome = again
        await self._settle(batch, outcome)

    async def _settle(self, batch: list[Ack], outcome: Completions | Exception) -> None:
        self.observer.acks_flushed(len(batch), committed=not isinstance(outcome, Exception))
        for index, ack in enumerate(batch):
            lease = ack.lease
            assert isinstance(lease, AsyncLease)
            try:
                if isinstance(outcome, Exception):
                    say_not_committed(lease, outcome)
                elif index in outcome.errors:
                    await self._fail(
                        lease, Raised.from_exception(outcome.errors[index]), ack.started
                    )
                else:
                    said = (
                        "done" if outcome[index] else await why_refused_async(self.queue, lease.job)
                    )
                    log_completion(self.observer, lease, said, ack.started)
            finally:
                self.holdings.let_go(lease, acked=True)
