"""The claimer: asks the queue for as many jobs as there are free slots (plus prefetch),
only of the kinds the worker has handlers for (W2, R23), and waits cheaply when there
are none (W6): a short pause that grows to the poll interval, or the poll interval
itself while notifications wake it.

While claimed jobs still wait for a slot, it waits until there is room for half as many
as it keeps ahead: one claim of several jobs costs little more than a claim of one, and
a claim per finished job was what limited the worker (issue 12's profile).

How many it keeps ahead of its slots (the prefetch) is the worker's `prefetch` when set;
by default it follows the handlers' mean run time: about AHEAD_SECONDS of work per
slot, at most AUTO_PREFETCH_MOST jobs, so no-op jobs are claimed by the dozen while a
worker whose handlers take seconds claims no job before a slot is free for it, and
leaves the rest to the other workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from queuecore.holdings import Holdings
from queuecore.observer import WorkerObserver
from queuecore.protocol import Queue
from queuecore.reconnect import connection_lost
from queuecore.unserved import UnservedNotice
from queuecore.worklog import describe, log

FIRST_IDLE_PAUSE = 0.05
AHEAD_SECONDS = 0.05
AUTO_PREFETCH_MOST = 32


def auto_prefetch(slots: int, handler_seconds: float | None) -> int:
    """Jobs to claim ahead of `slots` slots whose handlers ran `handler_seconds` on
    average: one per slot until a handler was timed, so each has its next job at hand."""
    if handler_seconds is None:
        return slots
    wanted = slots * AHEAD_SECONDS / max(handler_seconds, 1e-6)
    return min(AUTO_PREFETCH_MOST, int(wanted))


def active_limit(slots: int, prefetch: int | None, handler_seconds: float | None) -> int:
    """How many jobs to keep running or waiting for a slot: the slots plus the prefetch,
    the worker's `prefetch` when set, else `auto_prefetch`."""
    ahead = auto_prefetch(slots, handler_seconds) if prefetch is None else prefetch
    return slots + ahead


class Claimer:
    def __init__(
        self,
        queue: Queue,
        holdings: Holdings,
        *,
        name: str,
        queues: Sequence[str] | None,
        kinds: Sequence[str],
        slots: int,
        prefetch: int | None,
        ack_batch: int,
        poll_interval: float,
        exit_when_idle: float | None,
        listening: Callable[[], bool],
        observer: WorkerObserver,
    ) -> None:
        self.queue = queue
        self.holdings = holdings
        self.name = name
        self.queues = queues
        self.kinds = kinds
        self.slots = slots
        self.prefetch = prefetch  # None: auto_prefetch
        self.ack_batch = ack_batch
        self.poll_interval = poll_interval
        self.exit_when_idle = exit_when_idle
        self.listening = listening
        self.observer = observer
        self.unserved = UnservedNotice(queues, kinds)

    def run(self) -> None:
        """Claim until stopped, or until no job was ready for `exit_when_idle` seconds."""
        holdings = self.holdings
        pause = FIRST_IDLE_PAUSE
        idle_since: float | None = None
        while not holdings.stopping.is_set():
            holdings.wake.clear()
            # The slots and the prefetch kept busy, while the ack window may hold more
            # leases; a window that grows past its size (a slow flush) holds claiming back.
            active = active_limit(self.slots, self.prefetch, holdings.handler_seconds)
            room = holdings.room(active, active + self.ack_batch)
            if room <= 0 or (room < active // 2 and holdings.any_waiting()):
                holdings.wake.wait()  # a slot frees up, or stop()
                continue
            try:
                jobs = self.queue.claim(self.name, limit=room, queues=self.queues, kinds=self.kinds)
            except Exception as exc:
                if not connection_lost(exc):  # an outage the queue has logged already
                    log.warning("claim failed (%s); trying again in %.1fs", describe(exc), pause)
                else:
                    self.observer.unreachable()
                holdings.stopping.wait(pause)
                pause = min(pause * 2, self.poll_interval)
                continue
            self.observer.claimed(len(jobs))
            if jobs:
                holdings.hand_out(jobs)
                pause, idle_since = FIRST_IDLE_PAUSE, None
                self.unserved.busy()
                continue
            self.unserved.check(self.queue.stats)
            wait = self.poll_interval if self.listening() else pause
            if holdings.busy():
                idle_since = None  # handlers still running: not idle
            elif self.exit_when_idle is not None:
                idle_since = idle_since or time.monotonic()
                left = idle_since + self.exit_when_idle - time.monotonic()
                if left <= 0:
                    log.info("no work for %.1fs: exiting", self.exit_when_idle)
                    return
                wait = min(wait, left)
            holdings.wake.wait(wait)
            pause = min(pause * 2, self.poll_interval)
