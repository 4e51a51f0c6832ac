"""What a handler may say back to the worker besides returning: the two exceptions that
change what a failure does, and the lease it can consult while it runs (W1, W3).

A handler is `fn(job)`. It may return an effect `f(conn)`, which the worker commits in
the transaction that completes the job (R10), so the effect happens exactly once even
though the handler may run more than once.

What a run came to is an `Outcome`, read here once for every way of running handlers
(on the worker's threads, or in a handler process, W7): the worker only reports it.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from queuecore import validate
from queuecore.job import Job
from queuecore.protocol import Effect
from queuecore.sqlqueue import ERROR_TEXT_LIMIT

Handler = Callable[[Job], "Effect | None"]


class Permanent(Exception):
    """Raise to send the job straight to dead: retrying cannot help (bad input, gone for good)."""


class Retry(Exception):
    """Raise to retry after exactly `seconds` instead of the queue's backoff, e.g. when an
    upstream said when to come back. Still dead when the job is out of attempts."""

    def __init__(self, seconds: float, message: str = "") -> None:
        self.seconds = validate.non_negative_seconds("Retry seconds", seconds)
        super().__init__(message or f"retry in {self.seconds:g}s")


class Lease:
    """The worker's hold on one job while its handler runs.

    `lost` is set when a heartbeat finds the job no longer ours (the lease ran out and
    another claim took it, or it was finished elsewhere). A long handler can check it
    between steps, or sleep with `lost.wait(seconds)` so it wakes the moment the job is
    lost, and stop early: whatever it returns is discarded by the fence anyway.
    """

    __slots__ = ("job", "lost", "reporting")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.lost = threading.Event()
        # Set once the worker starts reporting the outcome: a heartbeat that then finds
        # the job finished is a race with that report, not a lost lease.
        self.reporting = False


_current: ContextVar[Lease] = ContextVar("queuecore_current_lease")


def current_lease() -> Lease:
    """The lease of the job this handler is running (the handler keeps its `fn(job)` shape)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_lease() is only available inside a running handler") from None


def run_handler(handler: Handler, lease: Lease) -> Effect | None:
    """Run `handler` with `lease` reachable through `current_lease()`."""
    token = _current.set(lease)
    try:
        return handler(lease.job)
    finally:
        _current.reset(token)


# --- what a run came to -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned: complete the job, committing `effect` with it (R10)."""

    effect: Effect | None = None


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler (or its effect) raised: fail the job, as the exception asks (W1).
    Plain values, so a handler process can send it to its supervisor."""

    error: str
    retry_in: float | None = None
    permanent: bool = False

    @classmethod
    def from_exception(cls, exc: BaseException) -> Raised:
        return cls(
            error_text(exc),
            retry_in=exc.seconds if isinstance(exc, Retry) else None,
            permanent=isinstance(exc, Permanent),
        )


@dataclass(frozen=True, slots=True)
class Completed:
    """A handler process completed the job itself, its effect being a closure it cannot
    send (R10): `done` is what the fenced complete answered."""

    done: bool


@dataclass(frozen=True, slots=True)
class Crashed:
    """The process running the handler died with it (W7): fail the job at once, with an
    error naming the exit, instead of waiting for its lease to run out."""

    error: str


Outcome = Returned | Raised | Completed | Crashed


def outcome_of(handler: Handler, lease: Lease) -> Returned | Raised:
    """Run the handler and read what it came to: the one place that interprets a
    handler's return value or exception."""
    try:
        returned = run_handler(handler, lease)
    except Exception as exc:
        return Raised.from_exception(exc)
    if returned is not None and not callable(returned):
        return Raised(
            f"TypeError: the handler returned {type(returned).__name__}; return None or "
            "an effect f(conn) to commit with the completion"
        )
    return Returned(returned)


def error_text(exc: BaseException) -> str:
    """What a person reading a dead job needs: the exception, then as much of the
    traceback's end (where it was raised) as the stored error has room for."""
    head = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_tb(exc.__traceback__))
    room = ERROR_TEXT_LIMIT - len(head) - 1
    return head if room <= 0 else f"{head}\n{trace[-room:]}"
