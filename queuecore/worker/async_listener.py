"""Being woken on an event loop (W6 for `AsyncWorker`): the twin of `queuecore.worker.listener`.

On PostgreSQL the async queue's `listen()` gives a LISTEN on an async connection of its
own; NOTIFYs of new jobs for the worker's queues wake the claimer at once, so an idle
worker can wait its whole poll interval between looks. The policies are the sync
worker's: the same self-test (a NOTIFY sent through the pool must come back), the same
log lines, polling as the fallback, and LISTEN again on a new connection after it is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from queuecore.observe.worklog import describe, log
from queuecore.worker.async_roles import wait_for
from queuecore.worker.listener import (
    LISTEN_PROBE_TIMEOUT,
    LISTEN_SLICE,
    say_listening,
    say_not_heard,
)

if TYPE_CHECKING:  # asyncqueue needs greenlet: the async extra only
    from queuecore.contract import AsyncListener


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
