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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from queuecore.executors.reconnect import connection_lost, report_later
from queuecore.handling import Completed, Crashed, Lease, Outcome, Raised, Returned
from queuecore.job import Completions
from queuecore.observe.observer import Refused, WorkerObserver, why_refused
from queuecore.observe.worklog import describe, first_line, label, log
from queuecore.protocol import Queue
from queuecore.worker.acks import Ack, AckWindow
from queuecore.worker.holdings import Holdings

T = TypeVar("T")
FIRST_PAUSE = 0.05
#: A failure report's answer, as the observer names the outcome (None: refused).
FAILED_OUTCOMES: dict[str, Literal["retried", "dead"]] = {"queued": "retried", "dead": "dead"}


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
        if ack_batch > 1 and ack_seconds > 0:
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
            return "each job completed at once"
        return f"acks in batches of up to {self.acks.size} or {self.acks.max_wait * 1000:g} ms"

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
            self.holdings.acking()  # the slot is free: claim its next job now
            self.acks.add(Ack(lease, effect, started, result=result))
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
        for index, ack in enumerate(batch):
            try:
                if isinstance(outcome, Exception):
                    say_not_committed(ack.lease, outcome)
                elif index in outcome.errors:
                    self._fail(ack.lease, Raised.from_exception(outcome.errors[index]), ack.started)
                else:
                    self._log_completion(ack.lease, outcome[index], ack.started)
            finally:
                self.holdings.let_go(ack.lease, acked=True)

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
        log.info("%s done in %.3fs", label(lease), time.monotonic() - started)
    else:
        log.warning(
            "%s finished after its lease was lost or the job was cancelled: result discarded",
            label(lease),
        )


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
