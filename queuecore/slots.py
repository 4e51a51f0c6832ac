"""Where a worker's handlers run: on the worker's own threads (`InThread`), or each slot
in a handler process of its own (`queuecore.supervisor.HandlerProcess`, W7). A slot
thread hands every job it takes to its runner and reports the outcome it gets back."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from queuecore.handling import (
    DEFAULT_MAX_RESULT_BYTES,
    Handler,
    Lease,
    Outcome,
    Raised,
    Returned,
    outcome_of,
)
from queuecore.holdings import Holdings
from queuecore.observer import WorkerObserver
from queuecore.reporter import Reporter


class Runner(Protocol):
    @property
    def started(self) -> bool: ...

    def start(self) -> None:
        """Be ready to run a job (start a handler process, if there is none)."""
        ...

    def run(self, lease: Lease) -> Outcome: ...

    def close(self) -> None: ...


class InThread:
    """The handler runs on the slot's thread, in the worker's process: no isolation, and
    nothing to start; what a `queuecore.Worker` does unless given handler processes."""

    started = True

    def __init__(self, handlers: Mapping[str, Handler], max_result_bytes: int) -> None:
        self.handlers = handlers
        self.max_result_bytes = max_result_bytes

    def start(self) -> None:
        pass

    def run(self, lease: Lease) -> Outcome:
        return run_in_this_process(self.handlers, lease, self.max_result_bytes)

    def close(self) -> None:
        pass


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


def run_slot(
    runner: Runner, holdings: Holdings, reporter: Reporter, observer: WorkerObserver
) -> None:
    """One slot: a job at a time, until stopping. A runner that is not started (a handler
    process, or one that died with its job) is started before the slot takes its next
    job, and counts as starting meanwhile, so that no job is claimed for it (the worker
    counted it before the slot's first start)."""
    pending = not runner.started  # counted as starting by the worker, not yet started
    try:
        while True:
            if not runner.started:
                if not pending:
                    holdings.starting(1)
                    pending = True
                try:
                    runner.start()
                finally:
                    holdings.starting(-1)
                    pending = False
            lease = holdings.next_waiting()
            if lease is None:
                return
            started = time.monotonic()
            observer.handler_started(lease.job)
            try:
                outcome = runner.run(lease)
            except BaseException:
                holdings.let_go(lease)
                raise
            finally:
                observer.handler_ended(lease.job, time.monotonic() - started)
            reporter.report(lease, outcome, started)
    finally:
        if pending:
            holdings.starting(-1)
        runner.close()
