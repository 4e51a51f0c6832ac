"""Being woken (W6): on PostgreSQL, a LISTEN connection turns NOTIFYs of new jobs into
an immediate claim; polling stays the fallback, since a notification is only a hint.
The same connection hears of cancelled jobs, so their handlers learn it at once (W9).
The sync worker's `Wakeups` (a thread) and the async one's `AsyncWakeups` (a task)
stand side by side, over the same self-test, log lines and fallback to polling."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from queuecore.observe.worklog import describe, log
from queuecore.protocol import Listener
from queuecore.worker.async_handling import wait_for

if TYPE_CHECKING:
    from queuecore.contract import AsyncListener

LISTEN_PROBE_TIMEOUT = 2.0
LISTEN_SLICE = 0.2


class Wakeups:
    """LISTENs, and LISTENs again on a new connection whenever it is lost, trying every
    poll interval meanwhile (the claimer polls then). A lost LISTEN is said once, not at
    every try, and "listening" again says it is over."""

    def __init__(
        self,
        open_listener: Callable[[], Listener | None],
        *,
        queues: Sequence[str] | None,
        wake: threading.Event,
        finished: threading.Event,
        poll_interval: float,
        cancelled: Callable[[list[int]], None] = lambda ids: None,
    ) -> None:
        self.open_listener = open_listener
        self.queues = queues
        self.wake = wake
        self.finished = finished
        self.poll_interval = poll_interval
        #: Told the ids of the jobs whose cancel was heard (W9).
        self.cancelled = cancelled
        #: True while notifications wake the worker; polling is then only a fallback.
        self.listening = False

    def run(self) -> None:
        said = False  # that LISTEN is lost, since it last worked
        while not self.finished.is_set():
            try:
                listener = self.open_listener()
            except Exception as exc:
                if not said:
                    log.warning("cannot LISTEN for new jobs (%s); polling", describe(exc))
                    said = True
                self.finished.wait(self.poll_interval)
                continue
            if listener is None:
                return  # this database has no notifications: polling it is
            try:
                if not listener.reaches_itself(LISTEN_PROBE_TIMEOUT):
                    say_not_heard(self.poll_interval)
                    return
                self.listening = True
                said = False
                self.wake.set()  # the claimer now waits on notifications, not a short pause
                say_listening(self.poll_interval)
                while not self.finished.is_set():
                    names = listener.wait(LISTEN_SLICE)
                    if any(self.queues is None or n in self.queues for n in names):
                        self.wake.set()
                    heard = listener.cancelled()
                    if heard:
                        self.cancelled(heard)
            except Exception as exc:
                if not said:
                    log.warning("the LISTEN connection failed (%s); polling", describe(exc))
                    said = True
                self.finished.wait(self.poll_interval)
            finally:
                self.listening = False
                listener.close()


def say_not_heard(poll_interval: float) -> None:
    """The self-test failed: polling from now on (both workers say it in these words)."""
    log.warning(
        "a NOTIFY this worker sent did not reach its own LISTEN (is a transaction-mode "
        "pooler such as PgBouncer in between?); it will poll every %.1fs instead",
        poll_interval,
    )


def say_listening(poll_interval: float) -> None:
    """LISTEN works (again): what ends a "LISTEN ... failed" line in the log."""
    log.info("listening for new jobs; polling every %.1fs too", poll_interval)


class AsyncWakeups:
    """LISTENs, and LISTENs again on a new connection whenever it is lost, trying every
    poll interval meanwhile (the claimer polls then). A lost LISTEN is said once, not at
    every try, and "listening" again says it is over. A LISTEN that fails its self-test
    (a transaction-mode pooler drops it silently) is given up for good: polling it is."""

    def __init__(
        self,
        open_listener: Callable[[], Awaitable[AsyncListener | None]],
        *,
        queues: Sequence[str] | None,
        wake: asyncio.Event,
        finished: asyncio.Event,
        poll_interval: float,
    ) -> None:
        self.open_listener = open_listener
        self.queues = queues
        self.wake = wake
        self.finished = finished
        self.poll_interval = poll_interval
        #: True while notifications wake the worker; polling is then only a fallback.
        self.listening = False

    async def run(self) -> None:
        said = False  # that LISTEN is lost, since it last worked
        while not self.finished.is_set():
            try:
                listener = await self.open_listener()
            except Exception as exc:
                if not said:
                    log.warning("cannot LISTEN for new jobs (%s); polling", describe(exc))
                    said = True
                await wait_for(self.finished, self.poll_interval)
                continue
            if listener is None:
                return  # this database has no notifications: polling it is
            try:
                if not await self._hear(listener):
                    return
            except Exception as exc:
                if self.listening or not said:  # lost again after it came back: say so
                    log.warning("the LISTEN connection failed (%s); polling", describe(exc))
                    said = True
            finally:
                self.listening = False
                await _close(listener)
            await wait_for(self.finished, self.poll_interval)

    async def _hear(self, listener: AsyncListener) -> bool:
        """Wake the claimer on each NOTIFY for its queues until the worker finishes; False
        at once if the listener does not hear its own NOTIFY."""
        if not await listener.reaches_itself(LISTEN_PROBE_TIMEOUT):
            say_not_heard(self.poll_interval)
            return False
        self.listening = True
        self.wake.set()  # the claimer now waits on notifications, not a short pause
        say_listening(self.poll_interval)
        while not self.finished.is_set():
            names = await listener.wait(LISTEN_SLICE)
            if any(self.queues is None or n in self.queues for n in names):
                self.wake.set()
        return True


async def _close(listener: AsyncListener) -> None:
    """Close a listener whose connection may be dead already: nothing to say then."""
    try:
        await listener.close()
    except Exception as exc:
        log.debug("closing the LISTEN connection: %s", describe(exc))
