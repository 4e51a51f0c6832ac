"""The reporter: the one place where what became of a job is told to the queue and to
the log: completed (at once, or through the ack window), failed, completed by a handler
process, crashed with its process (W7), or released unstarted (W4).

Reports are repeated until the database takes them: giving up on an outage, or on a
report the server rolled back to break deadlocks on each of the queue's tries
(`report_later`), would blame it on the job (a handler that succeeded reported as
failed, its attempt spent, or the job dead on its last attempt). Repeating is safe: the
fence refuses a report once another claim took the job over, and lets a late one land
when nobody did (R09). Only a second stop signal (`hurry`) ends the wait; the queue has
logged the outage.

The sync worker's `Reporter` and the async worker's `AsyncReporter` stand side by side
here, over the same policies: what each outcome means (`log_completion`,
`log_failure`), when a report is made again (`report_later`), and what a lost report
says.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeVar

from queuecore.executors.reconnect import connection_lost, report_later
from queuecore.handling import Completed, Crashed, Lease, Outcome, Raised, Returned
from queuecore.job import Completions
from queuecore.observe import worklog
from queuecore.observe.observer import Refused, WorkerObserver, why_refused, why_refused_async
from queuecore.observe.worklog import describe, first_line, label, lines_together, log
from queuecore.protocol import Queue
from queuecore.worker.acks import RETRY_PAUSE, Ack, AckWindow, complete_many_options
from queuecore.worker.async_handling import AsyncLease, wait_for
from queuecore.worker.holdings import AsyncHoldings, Holdings

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

T = TypeVar("T")
FIRST_PAUSE = 0.05
#: A failure report's answer, as the observer names the outcome (None: refused).
FAILED_OUTCOMES: dict[str, Literal["retried", "dead"]] = {"queued": "retried", "dead": "dead"}


def windowed(ack_batch: int, ack_seconds: float) -> bool:
    """Whether either worker's completions go through an ack window: batches of more
    than one job, waited for a while; otherwise each job is completed at once."""
    return ack_batch > 1 and ack_seconds > 0


def window_said(size: int, seconds: float) -> str:
    """How completions are committed, for the worker's first log line."""
    if size == 1:
        return "each job completed at once"
    return f"acks in batches of up to {size} or {seconds * 1000:g} ms"


class Reporter:
    def __init__(
        self,
        queue: Queue,
        holdings: Holdings,
        *,
        ack_batch: int,
        ack_seconds: float,
        longest_pause: float,
        hurry: threading.Event,
        observer: WorkerObserver,
    ) -> None:
        self.queue = queue
        self.observer = observer
        self.holdings = holdings
        self.longest_pause = longest_pause
        self.hurry = hurry
        self.acks: AckWindow | None = None  # None: each job completed at once
        if windowed(ack_batch, ack_seconds):
            self.acks = AckWindow(
                queue,
                size=ack_batch,
                max_wait=ack_seconds,
                settle=self._settle,
                persist=self.until_reachable,
            )

    def start(self) -> None:
        if self.acks is not None:
            self.acks.start()

    def close(self) -> None:
        """The finished jobs' completions commit before the exit."""
        if self.acks is not None:
            self.acks.close()

    def describe(self) -> str:
        """How completions are committed, for the worker's first log line."""
        if self.acks is None:
            return window_said(1, 0.0)
        return window_said(self.acks.size, self.acks.max_wait)

    def report(self, lease: Lease, outcome: Outcome, started: float) -> None:
        """Tell the queue what became of the job, then let go of it, unless its
        completion went to the ack window, which lets go of it once flushed."""
        windowed = False
        try:
            if isinstance(outcome, Returned):
                windowed = self._complete(lease, outcome, started)
            elif isinstance(outcome, Completed):
                self._log_completion(lease, outcome.done, started)
            elif isinstance(outcome, Crashed):
                self._fail(lease, Raised(outcome.error), started)
            else:
                self._fail(lease, outcome, started)
        finally:
            if not windowed:
                self.holdings.let_go(lease)

    def report_all(self, reports: list[tuple[Lease, Outcome, float]]) -> None:
        """`report` for each of several jobs (lease, outcome, when its handler started)
        that a slot learned of at once: their completions go to the ack window in one
        hand-over, not one each."""
        acks = self.acks
        if acks is None or len(reports) == 1:
            for lease, outcome, started in reports:
                self.report(lease, outcome, started)
            return
        windowed = [
            Ack(lease, outcome.effect, started, result=outcome.result)
            for lease, outcome, started in reports
            if isinstance(outcome, Returned)
        ]
        if windowed:
            self._to_window(acks, windowed)
        for lease, outcome, started in reports:
            if not isinstance(outcome, Returned):
                self.report(lease, outcome, started)

    def _to_window(self, window: AckWindow, acks: list[Ack]) -> None:
        """Completions handed to the ack window: their slots are free, so the claimer
        may claim their next jobs now."""
        self.holdings.acking(len(acks))
        window.add(acks)

    def waits_for_nothing(self, outcome: Outcome) -> bool:
        """Whether `report(…, outcome, …)` only hands the completion to the ack window,
        so a thread that must not wait on the database may call it."""
        return self.acks is not None and isinstance(outcome, Returned)

    def release(self, lease: Lease) -> None:
        """Give back a job claimed but never started, its attempt uncounted (R14)."""
        try:
            released = self.queue.release(lease.job)
        except Exception as exc:
            if not connection_lost(exc):  # an outage is the queue's to log, once
                log.warning(
                    "%s not released (%s); its lease will hand it on", label(lease), describe(exc)
                )
        else:
            if released:
                log.info("%s released unstarted", label(lease))
        self.holdings.let_go(lease)

    def until_reachable(self, report: Callable[[], T]) -> T:
        """Make a report until the database takes it (see the module's docstring)."""
        pause = FIRST_PAUSE
        while True:
            try:
                return report()
            except Exception as exc:
                if not report_later(exc) or self.hurry.is_set():
                    raise
            self.hurry.wait(pause)
            pause = min(pause * 2, self.longest_pause)

    def _complete(self, lease: Lease, returned: Returned, started: float) -> bool:
        """To the ack window (True), or at once."""
        effect, result = returned.effect, returned.result
        if self.acks is not None:
            self._to_window(self.acks, [Ack(lease, effect, started, result=result)])
            return True
        lease.reporting = True
        try:
            done = self.until_reachable(
                lambda: self.queue.complete(lease.job, effect=effect, result=result)
            )
        except Exception as exc:  # the effect raised (rolled back), or the database did
            if report_later(exc):  # given up on a second stop signal
                say_unreachable(lease)
                return False
            self._fail(lease, Raised.from_exception(exc), started)
            return False
        self._log_completion(lease, done, started)
        return False

    def _settle(self, batch: list[Ack], outcome: Completions | Exception) -> None:
        """Report what one flush of the ack window did, one log line per job, as one by
        one: an effect that raised fails only its own job; a batch that never committed
        leaves every job to its lease (it runs again), never reported done."""
        self.observer.acks_flushed(len(batch), committed=not isinstance(outcome, Exception))
        now = time.monotonic()
        done: list[tuple[Lease, str]] = []  # each job's line, said together (in order)
        with lines_together():
            for index, ack in enumerate(batch):
                try:
                    if not isinstance(outcome, Exception) and outcome[index]:
                        self.observer.finished(ack.lease.job, "done")
                        done.append((ack.lease, done_in(ack.started, now)))
                        continue
                    worklog.jobs_info(done)
                    done.clear()
                    if isinstance(outcome, Exception):
                        say_not_committed(ack.lease, outcome)
                    elif index in outcome.errors:
                        failed = Raised.from_exception(outcome.errors[index])
                        self._fail(ack.lease, failed, ack.started)
                    else:
                        self._log_completion(ack.lease, False, ack.started)
                finally:
                    self.holdings.let_go(ack.lease, acked=True)
            worklog.jobs_info(done)

    def _log_completion(self, lease: Lease, done: bool, started: float) -> None:
        said = "done" if done else why_refused(self.queue, lease.job)
        log_completion(self.observer, lease, said, started)

    def _fail(self, lease: Lease, raised: Raised, started: float) -> None:
        lease.reporting = True
        text = raised.error
        try:
            outcome = self.until_reachable(
                lambda: self.queue.fail(
                    lease.job, text, retry_in=raised.retry_in, permanent=raised.permanent
                )
            )
        except Exception as exc:
            say_failure_unreported(lease, text, exc)
            return
        refused = why_refused(self.queue, lease.job) if outcome is None else None
        log_failure(self.observer, lease, outcome, text, started, refused)


# --- what every worker says of a report (the sync one's threads, the async one's tasks)


def say_unreachable(lease: Lease) -> None:
    """A completion given up on a second stop signal, the database out of reach."""
    log.warning(
        "%s finished, but the database is out of reach: its lease will hand it on", label(lease)
    )


def say_not_committed(lease: Lease, error: Exception) -> None:
    """An ack window's batch that never committed: the job runs again."""
    log.error(
        "%s finished, but its completion did not commit (%s); its lease will hand it on",
        label(lease),
        describe(error),
    )


def say_failure_unreported(lease: Lease, text: str, error: Exception) -> None:
    log.error(
        "%s failed (%s), and reporting it failed too (%s); its lease will hand it on",
        label(lease),
        first_line(text),
        describe(error),
    )


def log_completion(
    observer: WorkerObserver, lease: Lease, outcome: Literal["done"] | Refused, started: float
) -> None:
    """What `complete` answered: done, or refused by the fence (`outcome` says why)."""
    observer.finished(lease.job, outcome)
    if outcome == "done":
        # A line per job: not even its label is made when INFO is not logged.
        if log.isEnabledFor(logging.INFO):
            worklog.jobs_info([(lease, done_in(started, time.monotonic()))])
    else:
        log.warning(
            "%s finished after its lease was lost or the job was cancelled: result discarded",
            label(lease),
        )


def done_in(started: float, now: float) -> str:
    """What the line per job completed says after the job's label."""
    return f"done in {now - started:.3f}s"


def log_failure(
    observer: WorkerObserver,
    lease: Lease,
    outcome: Literal["queued", "dead"] | None,
    text: str,
    started: float,
    refused: Refused | None,
) -> None:
    """What `fail` answered: queued for a retry, dead, or None (refused by the fence,
    for `refused`)."""
    elapsed = time.monotonic() - started
    if outcome is None:
        observer.finished(lease.job, refused or "lease_lost")
        log.warning("%s failed after its lease was lost: %s", label(lease), first_line(text))
    else:
        observer.finished(lease.job, FAILED_OUTCOMES[outcome])
        what = "queued for a retry" if outcome == "queued" else "dead"
        log.info("%s failed in %.3fs, %s: %s", label(lease), elapsed, what, first_line(text))
    log.debug("%s failure in full:\n%s", label(lease), text)


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
        self.window_size = ack_batch if windowed(ack_batch, ack_seconds) else 1
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
        return window_said(self.window_size, self.window_wait)

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
