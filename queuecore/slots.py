"""Where a worker's handlers run: on the worker's own threads (`InThread`), or each slot
in a handler process of its own (`queuecore.supervisor.HandlerProcess`, W7). A slot
thread hands every job it takes to its runner and reports the outcome it gets back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from queuecore.handling import Handler, Lease, Outcome, Raised, Returned, outcome_of


class Runner(Protocol):
    def start(self) -> None:
        """Be ready to run a job (start a handler process, if there is none)."""
        ...

    def run(self, lease: Lease) -> Outcome: ...

    def close(self) -> None: ...


class InThread:
    """The handler runs on the slot's thread, in the worker's process: no isolation, and
    nothing to start; what a `queuecore.Worker` does unless given handler processes."""

    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        self.handlers = handlers

    def start(self) -> None:
        pass

    def run(self, lease: Lease) -> Outcome:
        return run_in_this_process(self.handlers, lease)

    def close(self) -> None:
        pass


def run_in_this_process(handlers: Mapping[str, Handler], lease: Lease) -> Returned | Raised:
    handler = handlers.get(lease.job.kind)
    if handler is None:  # the registry changed after the claim: it asked for known kinds
        known = ", ".join(sorted(handlers)) or "none"
        return Raised(f"no handler for kind {lease.job.kind!r} (this registry knows: {known})")
    return outcome_of(handler, lease)
