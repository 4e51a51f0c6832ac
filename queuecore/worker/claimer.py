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
leaves the rest to the other workers.

That mean is learned mostly from short jobs, so it cannot see a long one coming (W9):
while a slot's handler runs long (as `handler_slot.running_long` judges), nothing is
claimed ahead for that slot, and once every slot runs long, the jobs claimed ahead
that waited HELD_AHEAD_SECONDS are released to the other workers' free slots instead of
queueing here behind the long ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.observe.observer import WorkerObserver
from queuecore.observe.worklog import describe, log
from queuecore.protocol import Queue
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.handler_slot import LONG_FACTOR, LONG_SECONDS
from queuecore.worker.unserved import UnservedNotice

FIRST_IDLE_PAUSE = 0.05
AHEAD_SECONDS = 0.05
AUTO_PREFETCH_MOST = 32
#: W9, for the automatic prefetch: a job claimed ahead that no slot of this worker took
#: within this many seconds, while every slot runs long, is released (its attempt given
#: back, R14) for the free slots of other workers; and nothing is claimed ahead for a
#: slot that runs long. A `prefetch` the worker was given is held as asked.
HELD_AHEAD_SECONDS = 0.5


def auto_prefetch(slots: int, handler_seconds: float | None) -> int:
    """Jobs to claim ahead of `slots` slots whose handlers ran `handler_seconds` on
    average: one per slot until a handler was timed, so each has its next job at hand."""
    if handler_seconds is None:
        return slots
    wanted = slots * AHEAD_SECONDS / max(handler_seconds, 1e-6)
    return min(AUTO_PREFETCH_MOST, int(wanted))


def active_limit(
    slots: int, prefetch: int | None, handler_seconds: float | None, running_long: int = 0
) -> int:
    """How many jobs to keep running or waiting for a slot: the slots plus the prefetch,
    the worker's `prefetch` when set (held as asked), else `auto_prefetch` for the slots
    that turn over (W9): a slot whose handler runs long (`running_long` of them) gets
    its next job when it is free, not before, so that the jobs behind it go to the free
    slots of other workers."""
    if prefetch is not None:
        return slots + prefetch
    return slots + auto_prefetch(max(0, slots - running_long), handler_seconds)


def long_after(handler_seconds: float | None) -> float:
    """How long a handler runs before its slot counts as running long: as a handler
    process's slot judges it (`handler_slot.running_long`)."""
    return max(LONG_SECONDS, LONG_FACTOR * (handler_seconds or 0.0))


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
        release: Callable[[Lease], None] = lambda lease: None,
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
        self.release = release  # gives a job claimed ahead back to the queue (R14)

    def run(self) -> None:
        """Claim until stopped, or until no job was ready for `exit_when_idle` seconds."""
        try:
            self._claim()
        finally:
            self.holdings.close_checks()

    def _claim(self) -> None:
        holdings = self.holdings
        pause = FIRST_IDLE_PAUSE
        idle_since: float | None = None
        while not holdings.stopping.is_set():
            holdings.wake.clear()
            # The slots' checks of the jobs they are about to start (W9), on this
            # thread's connection: a slot that asks sets `wake`.
            holdings.answer_checks(self.queue.held)
            # The slots and the prefetch kept busy, while the ack window may hold more
            # leases; a window that grows past its size (a slow flush) holds claiming back.
            mean = holdings.handler_seconds
            running_long = 0
            if self.prefetch is None:  # the automatic prefetch keeps to its time budget
                running_long = holdings.running_long(long_after(mean))
                if running_long >= self.slots:
                    for lease in holdings.overdue(HELD_AHEAD_SECONDS):
                        self.release(lease)
            active = active_limit(self.slots, self.prefetch, mean, running_long)
            room = holdings.room(active, active + self.ack_batch)
            if room <= 0 or (room < active // 2 and holdings.any_waiting()):
                # A slot frees up, or stop(); while jobs wait, look again at those held
                # ahead behind handlers that run long.
                holdings.wake.wait(HELD_AHEAD_SECONDS / 2 if holdings.any_waiting() else None)
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
