"""The worker's ack window: finished jobs wait a moment so that many completions share
one transaction (`complete_many`), one commit instead of one per job.

Why it cannot lose or wrongly accept a completion: a job in the window is still running
in the database under its lease, so a crash before the flush only makes the job run
again when that lease ends (at-least-once, as any crash); and `complete_many` fences
every job by its own token in one transaction, so what it reports True has committed.

The window knows nothing of logging or failing jobs: it hands each flushed batch and
what became of it to `settle`, the worker's business.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.job import Completions, Job
from queuecore.protocol import Effect, Queue

log = logging.getLogger("queuecore.worker")

RETRY_PAUSE = 0.25  # before the one second try of a batch the database refused


@dataclass(slots=True)
class Ack:
    """A finished handler's completion, waiting for its flush."""

    lease: Lease
    effect: Effect | None
    started: float  # when its handler started (time.monotonic), for the log line
    since: float = field(default_factory=time.monotonic)
    result: Any = None  # what the handler returned as the job's result (R24), if anything


#: Called once per flush with the batch, in order, and either the `Completions` of
#: `complete_many` or the exception that stopped it from committing.
Settle = Callable[[list[Ack], Completions | Exception], None]
#: Runs a report until the database takes it, riding out an outage (the worker's).
Persist = Callable[[Callable[[], Completions]], Completions]


class AckWindow:
    """Collects completions and flushes them with one `complete_many` when `size` wait or
    the oldest has waited `max_wait` seconds; on its own thread, so that the slot which
    hands over a completion is free for its next job at once."""

    def __init__(
        self, queue: Queue, *, size: int, max_wait: float, settle: Settle, persist: Persist
    ) -> None:
        self.queue = queue
        self.size = size
        self.max_wait = max_wait
        self._settle = settle
        self._persist = persist
        self._waiting: list[Ack] = []
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._flush_until_closed, name="queuecore-acks")
        self._thread.daemon = True  # a hard exit loses only unflushed completions: re-runs

    def start(self) -> None:
        self._thread.start()

    def add(self, acks: list[Ack]) -> None:
        """Queue completions, under one lock however many. Once the window closed (a
        handler that outlived the grace period of a stop), they are flushed at once on
        the caller's thread instead."""
        with self._changed:
            if not self._closing:
                waiting = len(self._waiting)
                self._waiting += acks
                if waiting == 0 or len(self._waiting) >= self.size > waiting:
                    self._changed.notify()
                return
        self._flush(acks)

    def close(self) -> None:
        """Flush every completion still waiting, then stop (graceful shutdown, W4)."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _flush_until_closed(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            self._flush(batch)

    def _next_batch(self) -> list[Ack]:
        """Wait until a batch is due: `size` completions, the oldest past `max_wait`, or
        closing. Empty only when closed and drained."""
        with self._changed:
            while True:
                if self._waiting:
                    due = self._waiting[0].since + self.max_wait - time.monotonic()
                    if self._closing or len(self._waiting) >= self.size or due <= 0:
                        batch = self._waiting[: self.size]
                        del self._waiting[: self.size]
                        return batch
                    self._changed.wait(due)
                elif self._closing:
                    return []
                else:
                    self._changed.wait()

    def _flush(self, batch: list[Ack]) -> None:
        for ack in batch:
            ack.lease.reporting = True  # a heartbeat that now finds it done is no loss
        jobs = [ack.lease.job for ack in batch]
        effects = [ack.effect for ack in batch]
        results = [ack.result for ack in batch]
        outcome: Completions | Exception
        try:
            outcome = self._persist(lambda: self._complete(jobs, effects, results))
        except Exception as error:
            # Nothing committed (complete_many rolls the whole batch back). An outage was
            # ridden out by `persist` (this is a stop given up on); try once more for a
            # passing error such as a busy database, then leave the jobs to their leases.
            if connection_lost(error):
                outcome = error
            else:
                log.warning("completing %d job(s) failed (%s); trying once more", len(batch), error)
                time.sleep(RETRY_PAUSE)
                try:
                    outcome = self._complete(jobs, effects, results)
                except Exception as again:
                    outcome = again
        try:
            self._settle(batch, outcome)
        except Exception:  # the window must outlive a bug in reporting
            log.exception("reporting %d completion(s) failed", len(batch))

    def _complete(
        self, jobs: list[Job], effects: list[Effect | None], results: list[Any]
    ) -> Completions:
        return self.queue.complete_many(jobs, **complete_many_options(effects, results))


def complete_many_options(effects: list[Effect | None], results: list[Any]) -> dict[str, Any]:
    """What a flush passes to `complete_many`, for every worker's ack window: only what
    the batch needs, so no savepoints without effects, and the plain batch statement
    when no job has a result."""
    options: dict[str, Any] = {}
    if any(effect is not None for effect in effects):
        options["effects"] = effects
    if any(result is not None for result in results):
        options["results"] = results
    return options
