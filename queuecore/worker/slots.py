"""Where a worker's handlers run: on the worker's own threads (`InThread`), or each slot
in a handler process of its own
(`queuecore.worker.processes.handler_slot.HandlerProcess`, W7). Each slot is a thread that
takes the claimed jobs, has them run and reports their outcomes."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Mapping
from typing import Protocol

from queuecore.handling import (
    DEFAULT_MAX_RESULT_BYTES,
    Handler,
    Lease,
    Raised,
    Returned,
    outcome_of,
)
from queuecore.observe.observer import WorkerObserver
from queuecore.worker.holdings import Holdings
from queuecore.worker.reporter import Reporter
from queuecore.worker.time_limits import NO_LIMITS, TimeLimits, timed_out


class Runner(Protocol):
    """Where a slot's handlers run; `serve` is the slot, until stopping."""

    @property
    def started(self) -> bool:
        """Whether it can run a job now (a handler process must start first)."""
        ...

    @property
    def slots(self) -> int:
        """How many of the worker's slots it is: jobs it runs at once."""
        ...

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None: ...

    def abandon(self) -> None:
        """The worker exits with jobs still running past its grace (W4): stop their
        handlers where that can be done, and report nothing of them, so that each job
        stays running under its lease until that runs out and hands it on, and its work
        is not going on while another worker runs it again."""
        ...


class InThread:
    """The handler runs on the slot's thread, in the worker's process: no isolation, and
    nothing to start; what a `queuecore.Worker` does unless given handler processes.

    A handler with a time limit (W8) runs on a thread of its own instead, which the slot
    waits for until the limit: a thread cannot be killed, so past it the slot marks the
    lease lost, fails the job and goes on to the next, leaving the handler to end by
    itself (whatever it then returns is discarded). Without a limit nothing changes, so
    the common path pays nothing for it. The cancel grace (W9) is a handler process's:
    here a handler whose lease was lost must see `lost` itself."""

    started = True
    slots = 1

    def __init__(
        self, handlers: Mapping[str, Handler], max_result_bytes: int, limits: TimeLimits = NO_LIMITS
    ) -> None:
        self.handlers = handlers
        self.max_result_bytes = max_result_bytes
        self.limits = limits

    def abandon(self) -> None:
        """Nothing to stop: a thread cannot be killed; the worker's exit ends it."""

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """One job at a time, until stopping."""
        while (lease := holdings.next_waiting()) is not None:
            started = time.monotonic()
            lease.began = True
            observer.handler_started(lease.job)
            try:
                limit = self.limits.of(lease.job.kind)
                if limit is None:
                    outcome = run_in_this_process(self.handlers, lease, self.max_result_bytes)
                else:
                    outcome = self._run_limited(lease, limit)
            except BaseException:
                holdings.let_go(lease)
                raise
            finally:
                seconds = time.monotonic() - started
                observer.handler_ended(lease.job, seconds)
                holdings.ran(seconds)
            reporter.report(lease, outcome, started)

    def _run_limited(self, lease: Lease, limit: float) -> Returned | Raised:
        """The handler on a thread of its own, waited for until `limit` (W8)."""
        ran: list[Returned | Raised] = []
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run,
            args=(
                lambda: ran.append(
                    run_in_this_process(self.handlers, lease, self.max_result_bytes)
                ),
            ),
            name=f"queuecore-handler-{lease.job.id}",
            daemon=True,  # a handler that never returns does not hold up the exit
        )
        thread.start()
        thread.join(limit)
        if ran:
            return ran[0]
        lease.mark_lost()  # the handler can see it, and stop early
        return Raised(
            f"{timed_out(limit)} (its handler runs on in the worker's process, which "
            "cannot stop it; its outcome is discarded)"
        )


def run_in_this_process(
    handlers: Mapping[str, Handler],
    lease: Lease,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> Returned | Raised:
    handler = handlers.get(lease.job.kind)
    if handler is None:  # the registry changed after the claim: it asked for known kinds
        known = ", ".join(sorted(handlers)) or "none"
        return Raised(f"no handler for kind {lease.job.kind!r} (this registry knows: {known})")
    return outcome_of(handler, lease, max_result_bytes=max_result_bytes)
