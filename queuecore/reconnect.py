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
threads and retries run into it in between: a restart must not bury the log.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from queuecore.errors import OutcomeUnknownError

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

    def noticed(self, what: str, exc: DBAPIError) -> None:
        cause = str(exc.orig).strip().partition("\n")[0]  # psycopg adds hint lines
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

    def over(self) -> None:
        if self._since is None:  # the usual case: no lock on the way of every operation
            return
        with self._lock:
            since, self._since = self._since, None
            if since is not None:
                self._ended = time.monotonic()
                level = logging.WARNING if self._said else logging.DEBUG
                log.log(
                    level, "queuecore: database connection back after %.1fs", self._ended - since
                )


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` is a lost connection that the queue's own retries did not outlast:
    the database is out of reach, the operation itself is not at fault, and the queue
    has already logged the outage."""
    return getattr(exc, LOST, None) is not None


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
            except BaseException:
                transaction.rollback()
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
            except BaseException:
                await transaction.rollback()
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
        pause = next(pauses, None) if queue.backend.rolled_back(exc) else None
        if pause is None:
            raise exc
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
        raise exc
    return pause


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
                    return await method(self, *args, **kwargs)
                pauses = iter(PAUSES)
                while True:
                    try:
                        result = await method(self, *args, **kwargs)
                    except DBAPIError as exc:
                        pause = _pause_before_retry(exc, name, after_commit, kwargs, self, pauses)
                    else:
                        self._outage.over()
                        return result
                    await asyncio.sleep(pause)

            return run_async  # type: ignore[return-value]

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("conn") is not None:
                return method(self, *args, **kwargs)
            pauses = iter(PAUSES)
            while True:
                try:
                    result = method(self, *args, **kwargs)
                except DBAPIError as exc:
                    pause = _pause_before_retry(exc, name, after_commit, kwargs, self, pauses)
                else:
                    self._outage.over()
                    return result
                time.sleep(pause)

        return run  # type: ignore[return-value]

    return decorate
