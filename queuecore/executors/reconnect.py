"""Surviving a dropped connection: a database restart, a terminated backend.

SQLAlchemy already invalidates a connection that died (and every older one in the
pool), so the next checkout is fresh. What is left is the operation that was cut off,
and whether running it again could apply it twice:

- The connection died before the commit was sent (at connect, or during a statement):
  the server rolled the transaction back, so a second run is the only one that counts.
- The server rolled the transaction back to break a deadlock, or a lock wait ran out
  (`Backend.rolled_back`): nothing was written, the connection lives, and a second run
  is safe; it is logged at DEBUG, as no outage.
- It died while committing: the commit may or may not have landed. Only operations
  whose second run cannot apply anything twice are run again. The fenced reports
  (complete, fail, heartbeat, release): a landed commit cleared the token or moved the
  lease on, so the fence refuses the second run and a complete's effect lands once;
  the second run then answers False (or None) for a job that was in fact handled. A
  claim: at worst its first run leased jobs to a token nobody holds, and those come
  back when the lease ends, like a crashed worker's. Reads, and an enqueue with a
  dedupe_key (the second run finds the first's job). Anything else raises
  OutcomeUnknownError rather than guess.

Pool pre-ping was the alternative: it costs a round trip on every checkout (every
claim and complete) and still cannot save a transaction whose connection dies halfway.

An outage is logged twice, when it starts and when it ends (`Outage`), however many
threads and retries run into it in between: a restart must not bury the log. A full disk
is an outage of writes, logged the same way.

What is not run again reaches the caller as a `QueuecoreError` that says what happened,
with the driver's error as its `__cause__` (R30): `ConnectionLostError` once the retries
are spent, `DeadlockError` likewise, `StorageFullError` and `DatabaseLimitError` at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from queuecore.core.dsn import masked, shown
from queuecore.errors import (
    ConnectionLostError,
    DeadlockError,
    OutcomeUnknownError,
    StorageFullError,
)

if TYPE_CHECKING:  # the asyncio extension needs greenlet: the async extra only
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger("queuecore")

# Pauses before each new try: a terminated backend is replaced at once, a restarting
# server needs a few seconds. Longer outages are the caller's (the worker's back-off).
PAUSES = (0.0, 0.25, 0.5, 1.0, 2.0)

# A connection found lost this soon after the outage was said to be over belongs to the
# same outage: after a failover each of a worker's connections (claims, heartbeats,
# completions) meets the old server once, a moment apart.
SAME_OUTAGE = 5.0

# Set on a DBAPIError that lost its connection: "before commit" or "during commit".
LOST = "_queuecore_lost"

F = TypeVar("F", bound=Callable[..., Any])


#: How a child process that cannot open its own connection says so, and says it is over,
#: in the words the queue's `Outage` uses: one outage, one pair of lines.
CONNECT_LOST = (
    "queuecore: database connection lost opening this process's connection (%s); "
    "trying again every second, quiet until it is back"
)
CONNECT_BACK = "queuecore: database connection back after %.1fs"


class Outage:
    """Whether one queue's database is out of reach, shared by every thread using it.

    The first lost connection says so at WARNING and the first success after it says how
    long it lasted; everything between is DEBUG. A worker's slots, heartbeat and claimer
    each meet the same restart, several times over: one line per meeting would be
    dozens per second, and the one that matters would scroll away. A connection lost
    within SAME_OUTAGE of the end is the same outage's, said only if it lasts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._ended = -SAME_OUTAGE  # when the last outage was over (monotonic)
        self._said = False  # whether this outage was said to have begun
        # A full disk: since when, and which operations met it. Reads still succeed on a
        # full disk, so only one of those operations succeeding again says it is over.
        self._full_since: float | None = None
        self._full: set[str] = set()

    def noticed(self, what: str, exc: DBAPIError) -> None:
        cause = _first_line(exc)
        # Said under the lock, as `over` says its line: a thread that saw the outage end
        # between this one's noticing and its saying would log "back" before "lost".
        with self._lock:
            now = time.monotonic()
            if self._since is None:
                self._since = now
                self._said = False
            straggler = self._since - self._ended < SAME_OUTAGE  # of the outage just over
            if not self._said and (not straggler or now - self._since >= SAME_OUTAGE):
                self._said = True
                log.warning(
                    "queuecore: database connection lost %s; reconnecting with back-off, "
                    "quiet until it is back: %s",
                    what,
                    cause,
                )
                return
        log.debug("queuecore: still no database connection (%s): %s", what, cause)

    def full(self, name: str, where: str, exc: DBAPIError) -> None:
        with self._lock:
            self._full.add(name)
            if self._full_since is None:
                self._full_since = time.monotonic()
                log.warning(
                    "queuecore: %s is full, nothing can be written until there is room; "
                    "quiet until a write succeeds: %s",
                    where,
                    _first_line(exc),
                )
                return
        log.debug("queuecore: %s still full (%s)", where, name)

    def over(self, name: str) -> None:
        if self._since is None and self._full_since is None:  # the usual case: no lock
            return
        with self._lock:
            since, self._since = self._since, None
            if since is not None:
                self._ended = time.monotonic()
                level = logging.WARNING if self._said else logging.DEBUG
                log.log(level, CONNECT_BACK, self._ended - since)
            if name in self._full and self._full_since is not None:
                full_since, self._full_since = self._full_since, None
                self._full.clear()
                log.warning(
                    "queuecore: writes succeed again after %.1fs", time.monotonic() - full_since
                )


def _first_line(exc: DBAPIError) -> str:
    return masked(str(exc.orig).strip().partition("\n")[0])  # psycopg adds hint lines


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` is an outage the queue's own retries did not outlast, which the
    queue has already logged: a lost connection, or a full disk. The operation itself
    is not at fault; trying it again later is the thing to do, quietly."""
    return isinstance(exc, (ConnectionLostError, StorageFullError)) or (
        getattr(exc, LOST, None) is not None
    )


def report_later(exc: BaseException) -> bool:
    """Whether a worker's report (a completion, a failure) that raised `exc` is made again
    later rather than charged to its job: an outage (`connection_lost`), or a server that
    rolled it back to break a deadlock on every one of the queue's own tries (seen on
    MariaDB while every worker reconnected after an outage). Neither is the handler's
    doing, and nothing of the report was applied, its effect included."""
    return connection_lost(exc) or isinstance(exc, DeadlockError)


def where(queue: Any) -> str:
    """The queue's database for a message: its URL without the password."""
    return f"the database {shown(queue.engine.url)}"


def give_up(exc: DBAPIError, queue: Any, name: str) -> NoReturn:
    """Raise, for a driver error that is not run again, the queuecore error it means
    (R30), from `exc`; `exc` itself where it means none of them."""
    if getattr(exc, LOST, None) is not None:  # an operation that is never run again
        queue._outage.noticed(name, exc)
        raise ConnectionLostError(
            f"{name}: the connection to {where(queue)} was lost: {_first_line(exc)}"
        ) from exc
    failure = queue.backend.failure(exc)
    if failure is None:
        raise exc
    if failure is StorageFullError:
        queue._outage.full(name, where(queue), exc)
        said = "is full"
    else:
        said = "refused a value past a limit of its own"
    raise failure(f"{name}: {where(queue)} {said}: {_first_line(exc)}") from exc


def _rollback_error_wins(failed: BaseException) -> bool:
    """Whether a rollback's own error should be raised in place of `failed`, the work's.
    When the work's error was the database's, a rollback that fails too (the connection
    died under the statement: psycopg then says "another command is already in
    progress") is its echo: the work's error says what happened, and is raised, so a lost
    connection is still seen as one (CI of e2e4d7b: test_reconnect met the rollback's
    error instead)."""
    return not isinstance(failed, DBAPIError)


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """`engine.begin()`, marking an error that means "the connection is gone" with
    when it happened, so `reconnecting` can tell whether a second run is safe."""
    phase = "connect"
    try:
        with engine.connect() as conn:
            phase = "work"
            transaction = conn.begin()
            try:
                yield conn
            except BaseException as failed:
                try:
                    transaction.rollback()
                except DBAPIError:
                    if _rollback_error_wins(failed):
                        raise
                raise
            phase = "commit"
            transaction.commit()
    except DBAPIError as exc:
        if phase == "connect" or exc.connection_invalidated:
            setattr(exc, LOST, "during commit" if phase == "commit" else "before commit")
        raise


@asynccontextmanager
async def async_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """`transaction` for an AsyncEngine: the same marks on the same errors."""
    phase = "connect"
    try:
        async with engine.connect() as conn:
            phase = "work"
            transaction = await conn.begin()
            try:
                yield conn
            except BaseException as failed:
                try:
                    await transaction.rollback()
                except DBAPIError:
                    if _rollback_error_wins(failed):
                        raise
                raise
            phase = "commit"
            await transaction.commit()
    except DBAPIError as exc:
        if phase == "connect" or exc.connection_invalidated:
            setattr(exc, LOST, "during commit" if phase == "commit" else "before commit")
        raise


def _pause_before_retry(
    exc: DBAPIError,
    name: str,
    safe: Callable[[Mapping[str, Any]], bool] | bool,
    kwargs: Mapping[str, Any],
    queue: Any,
    pauses: Iterator[float],
) -> float:
    """How long to wait before running `name` again after `exc`; raises when it must not
    run again (neither a lost connection nor a transaction the server rolled back, a
    commit that may have landed, no tries left)."""
    lost = getattr(exc, LOST, None)
    if lost is None:
        if not queue.backend.rolled_back(exc):
            give_up(exc, queue, name)
        pause = next(pauses, None)
        if pause is None:
            raise DeadlockError(
                f"{name}: {where(queue)} rolled it back to break a deadlock (or a lock wait "
                f"ran out) on each of {len(PAUSES) + 1} tries: {_first_line(exc)}"
            ) from exc
        log.debug("queuecore: %s rolled back by the server, run again: %s", name, exc.orig)
        return pause
    outage: Outage = queue._outage
    outage.noticed(f"{lost} of {name}", exc)
    if lost == "during commit" and not (safe(kwargs) if callable(safe) else safe):
        raise OutcomeUnknownError(
            f"the database connection was lost while committing {name}: it may or may not "
            "have been applied. Check before repeating it (an enqueue with a dedupe_key is "
            "safe to repeat)."
        ) from exc
    pause = next(pauses, None)
    if pause is None:
        raise ConnectionLostError(
            f"{name}: the connection to {where(queue)} was lost, and reconnecting failed for "
            f"{sum(PAUSES):.0f}s: {_first_line(exc)}"
        ) from exc
    return pause


def translating(method: F) -> F:
    """For an operation that is never run again (a purge: batches of their own, whose
    count a second run could not know), still raise the queuecore error a driver error
    means (R30)."""
    name = method.__name__
    if asyncio.iscoroutinefunction(method):

        @functools.wraps(method)
        async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await method(self, *args, **kwargs)
            except DBAPIError as exc:
                give_up(exc, self, name)

        return run_async  # type: ignore[return-value]

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except DBAPIError as exc:
            give_up(exc, self, name)

    return run  # type: ignore[return-value]


def reconnecting(*, after_commit: Callable[[Mapping[str, Any]], bool] | bool) -> Callable[[F], F]:
    """Run the method again when its connection died. `after_commit` says whether that
    is safe when the commit was in flight (a predicate receives the keyword arguments).
    A call inside the caller's own transaction (`conn=`) is the caller's to retry.
    The instance's `_outage` (an `Outage`) hears of every loss and every success, and its
    `backend` says which errors are a transaction the server rolled back.
    Coroutine methods (the async queue's) are retried the same way, awaiting their pauses."""

    def decorate(method: F) -> F:
        name = method.__name__
        if asyncio.iscoroutinefunction(method):

            @functools.wraps(method)
            async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                if kwargs.get("conn") is not None:
                    try:
                        return await method(self, *args, **kwargs)
                    except DBAPIError as exc:
                        give_up(exc, self, name)
                pauses = iter(PAUSES)
                while True:
                    try:
                        result = await method(self, *args, **kwargs)
                    except DBAPIError as exc:
                        pause = _pause_before_retry(exc, name, after_commit, kwargs, self, pauses)
                    else:
                        self._outage.over(name)
                        return result
                    await asyncio.sleep(pause)

            return run_async  # type: ignore[return-value]

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("conn") is not None:
                try:
                    return method(self, *args, **kwargs)
                except DBAPIError as exc:
                    give_up(exc, self, name)
            pauses = iter(PAUSES)
            while True:
                try:
                    result = method(self, *args, **kwargs)
                except DBAPIError as exc:
                    pause = _pause_before_retry(exc, name, after_commit, kwargs, self, pauses)
                else:
                    self._outage.over(name)
                    return result
                time.sleep(pause)

        return run  # type: ignore[return-value]

    return decorate
