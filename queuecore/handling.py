"""What a handler may say back to the worker besides returning: the two exceptions that
change what a failure does, and the lease it can consult while it runs (W1, W3).

A handler is `fn(job)`. What it returns says how the job is completed (W1, R24):
- None: done, no result;
- an effect `f(conn)`, which the worker commits in the transaction that completes the
  job (R10), so the effect happens exactly once even though the handler may run more
  than once;
- `Done(result=..., effect=...)`: both;
- any other value: the job's result, a JSON value that `get(id).result` hands back
  (a dict, as a Celery task returns, is a result, not a mistake).

What a run came to is an `Outcome`, read here once for every way of running handlers
(on the worker's threads, or in a handler process, W7): the worker only reports it.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from queuecore.core import validate
from queuecore.core.tracing import handler_span
from queuecore.job import Job
from queuecore.protocol import Effect

Handler = Callable[[Job], object]

#: The result size a worker checks when its queue does not say (the connect default).
DEFAULT_MAX_RESULT_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Done:
    """A handler's way to return both a result (any JSON value) and an effect `f(conn)`."""

    result: Any = None
    effect: Effect | None = None


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

    __slots__ = ("_lost", "began", "checked", "claimed", "handed", "job", "noted", "reporting")

    def __init__(self, job: Job) -> None:
        self.job = job
        # Made when first asked for (`lost`): an Event for every job claimed cost the
        # worker's claimer about a quarter of its time, and most leases are never lost.
        self._lost: threading.Event | None = None
        #: When the worker claimed it, and when it handed it to a slot (0.0: not yet),
        #: on time.monotonic(): what claiming ahead is kept within (W9).
        self.claimed = time.monotonic()
        self.handed = 0.0
        #: When its fence was last read (its claim, or a check before hand-over, W9).
        self.checked = self.claimed
        #: Whether its handler began: a job handed to a handler process with the one it
        #: runs waits there until that returns, and may yet be given back unstarted.
        self.began = False
        #: Whether the database was told its handler started (`Queue.mark_started`).
        self.noted = False
        # Set once the worker starts reporting the outcome: a heartbeat that then finds
        # the job finished is a race with that report, not a lost lease.
        self.reporting = False

    @property
    def lost(self) -> threading.Event:
        """Set once the job is no longer this worker's (W3): a handler may wait on it."""
        event = self._lost
        if event is None:
            with _making:  # one Event, whichever thread asks first
                event = self._lost
                if event is None:
                    event = self._lost = threading.Event()
        return event

    @property
    def is_lost(self) -> bool:
        """Whether `lost` is set, without making it: the worker asks of every lease."""
        event = self._lost
        return event is not None and event.is_set()

    def mark_lost(self) -> bool:
        """A heartbeat found the job no longer ours: tell the handler (W3). True for the
        call that marked it: a loss heard two ways at once (a heartbeat or a poll, and a
        cancel's NOTIFY, W9) is counted and logged once."""
        with _marking:
            lost = self.lost
            if lost.is_set():
                return False
            lost.set()
            return True


#: Makes `Lease.mark_lost` a test-and-set: losses are rare, one lock serves them all.
_marking = threading.Lock()
#: Makes `Lease.lost` once per lease (taken inside `_marking`, never around it).
_making = threading.Lock()


_current: ContextVar[Lease] = ContextVar("queuecore_current_lease")


def current_lease() -> Lease:
    """The lease of the job this handler is running (the handler keeps its `fn(job)` shape)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_lease() is only available inside a running handler") from None


def set_current_lease(lease: Lease) -> Token[Lease]:
    """Make `lease` what `current_lease()` answers in this context, until the token is
    reset: for each way of running a handler (on a thread, or as an asyncio task)."""
    return _current.set(lease)


def run_handler(
    handler: Handler, lease: Lease, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
) -> Done:
    """Run `handler` with `lease` reachable through `current_lease()`, and say what its
    return value asks for. A result that cannot be stored raises here, as if the handler
    had raised: its job fails on its own instead of spoiling a batch of completions."""
    token = set_current_lease(lease)
    try:
        returned = handler(lease.job)
    finally:
        _current.reset(token)
    return completion_of(returned, max_result_bytes=max_result_bytes)


def completion_of(returned: object, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> Done:
    """What a handler's return value means (see the module's docstring)."""
    if returned is None:
        return Done()
    if inspect.isawaitable(returned):  # e.g. a sync decorator around an async def handler
        if inspect.iscoroutine(returned):
            returned.close()  # never to run: no "never awaited" warning besides this error
        raise TypeError(
            "the handler returned an awaitable: make the handler itself `async def` (or "
            "keep its decorator's wrapper async), so the worker awaits it"
        )
    if isinstance(returned, Done):
        if returned.effect is not None and not callable(returned.effect):
            raise TypeError(
                f"Done(effect=...) must be an effect f(conn), got {type(returned.effect).__name__}"
            )
        done = returned
    elif callable(returned):
        return Done(effect=returned)
    else:
        done = Done(result=returned)
    if done.result is not None:
        validate.result(done.result, max_bytes=max_result_bytes)
    return done


# --- what a run came to -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned: complete the job with `result`, committing `effect` with it
    (R10, R24)."""

    effect: Effect | None = None
    result: Any = None


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


def outcome_of(
    handler: Handler, lease: Lease, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
) -> Returned | Raised:
    """Run the handler and read what it came to: the one place that interprets a
    handler's return value or exception. A result that cannot be stored is the
    handler's failure, its own job's alone. The trace span (OpenTelemetry, when the
    application traces) opens here, in the process the handler runs in."""
    try:
        with handler_span(lease.job):
            done = run_handler(handler, lease, max_result_bytes=max_result_bytes)
    except Exception as exc:
        return Raised.from_exception(exc)
    return Returned(done.effect, done.result)


def error_text(exc: BaseException) -> str:
    """What a person reading a dead job needs: the exception, then as much of the
    traceback's end (where it was raised) as the stored error has room for."""
    head = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_tb(exc.__traceback__))
    room = validate.ERROR_TEXT_LIMIT - len(head) - 1
    return head if room <= 0 else f"{head}\n{trace[-room:]}"
