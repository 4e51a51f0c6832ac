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
queueing here behind the long ones.

The sync worker's `Claimer` (a thread) and the async one's `AsyncClaimer` (a task) stand
side by side, given the same settings (`Claiming`) and paced by one policy
(`ClaimPacing`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.observe.observer import WorkerObserver
from queuecore.observe.worklog import describe, log
from queuecore.protocol import AsyncQueue, Queue
from queuecore.worker.async_handling import wait_for
from queuecore.worker.holdings import AsyncHoldings, Holdings, room_for_claims
from queuecore.worker.processes.handler_slot import LONG_FACTOR, LONG_SECONDS
from queuecore.worker.settings import WorkerSettings
from queuecore.worker.unserved import UnservedNotice

FIRST_IDLE_PAUSE = 0.05
AHEAD_SECONDS = 0.05
AUTO_PREFETCH_MOST = 128
#: W9, for the automatic prefetch: a job claimed ahead that no slot of this worker took
#: within this many seconds, while every slot runs long, is released (its attempt given
#: back, R14) for the free slots of other workers; and nothing is claimed ahead for a
#: slot that runs long. A `prefetch` the worker was given is held as asked.
HELD_AHEAD_SECONDS = 0.5


def auto_prefetch(slots: int, handler_seconds: float | None) -> int:
    """Jobs to claim ahead of `slots` slots whose handlers ran `handler_seconds` on
    average: one per slot until the mean is known (`HandlerTimes`), so each has its next
    job at hand."""
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


Q = TypeVar("Q")
H = TypeVar("H")


class Claiming(Generic[Q, H]):
    """What either worker's claimer is given: its queue and holdings, the worker's
    settings (name, queues, slots, prefetch, ack window, poll interval, idle exit), the
    registry's kinds (R23), whether a NOTIFY can wake it, and the observer."""

    def __init__(
        self,
        queue: Q,
        holdings: H,
        settings: WorkerSettings,
        *,
        kinds: Sequence[str],
        listening: Callable[[], bool],
        observer: WorkerObserver,
    ) -> None:
        self.queue = queue
        self.holdings = holdings
        self.name = settings.name
        self.queues = settings.queues
        self.kinds = kinds
        self.slots = settings.concurrency
        self.prefetch = settings.prefetch  # None: auto_prefetch
        self.ack_batch = settings.ack_batch
        self.poll_interval = settings.poll_interval
        self.exit_when_idle = settings.exit_when_idle
        self.listening = listening
        self.observer = observer
        self.unserved = UnservedNotice(self.queues, kinds)


class Claimer(Claiming[Queue, Holdings]):
    """The sync worker's claimer, on a thread of its own: the async one's rules (below),
    and the checks the slots ask for before they start a job claimed ahead (W9), read
    on its connection; while every slot runs long, it gives back the jobs held ahead
    past HELD_AHEAD_SECONDS (`release`), so that idle workers take them."""

    def __init__(
        self,
        queue: Queue,
        holdings: Holdings,
        settings: WorkerSettings,
        release: Callable[[Lease], None],
        *,
        kinds: Sequence[str],
        listening: Callable[[], bool],
        observer: WorkerObserver,
    ) -> None:
        super().__init__(
            queue, holdings, settings, kinds=kinds, listening=listening, observer=observer
        )
        self.release = release  # gives a job claimed ahead back to the queue (R14)

    def run(self) -> None:
        """Claim until stopped, or until no job was ready for `exit_when_idle` seconds."""
        try:
            self._claim()
        finally:
            self.holdings.close_checks()

    def _claim(self) -> None:
        holdings = self.holdings
        pacing = ClaimPacing(self.poll_interval, self.exit_when_idle, self.observer)
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
                # Room for a claim, or stop(); while jobs wait, look again at those held
                # ahead behind handlers that run long.
                holdings.wake_for_room(active, active + self.ack_batch, max(1, active // 2))
                holdings.wake.wait(HELD_AHEAD_SECONDS / 2 if holdings.any_waiting() else None)
                continue
            try:
                jobs = self.queue.claim(self.name, limit=room, queues=self.queues, kinds=self.kinds)
            except Exception as exc:
                holdings.stopping.wait(pacing.failed(exc))
                continue
            self.observer.claimed(len(jobs))
            if jobs:
                holdings.hand_out(jobs)
                pacing.claimed()
                self.unserved.busy()
                continue
            self.unserved.check(self.queue.stats)
            wait = pacing.empty(listening=self.listening(), busy=holdings.busy())
            if wait is None:
                return
            holdings.wake_for_any()  # a job let go may end the idle wait (exit_when_idle)
            holdings.wake.wait(wait)


class ClaimPacing:
    """When either worker's claimer claims next. After a claim that failed, a pause that
    doubles from FIRST_IDLE_PAUSE to the poll interval (an outage is waited out, not
    blamed on a job). After one that found nothing, the poll interval at once while a
    NOTIFY can wake the claimer, that pause otherwise; and once nothing was ready, with
    no handler running, for `exit_when_idle` seconds, the end."""

    def __init__(
        self, poll_interval: float, exit_when_idle: float | None, observer: WorkerObserver
    ) -> None:
        self.poll_interval = poll_interval
        self.exit_when_idle = exit_when_idle
        self.observer = observer
        self.pause = FIRST_IDLE_PAUSE
        self.idle_since: float | None = None

    def failed(self, exc: Exception) -> float:
        """A claim raised `exc`: the seconds to wait before the next."""
        if not connection_lost(exc):  # an outage the queue has logged already
            log.warning("claim failed (%s); trying again in %.1fs", describe(exc), self.pause)
        else:
            self.observer.unreachable()
        return self._next_pause()

    def claimed(self) -> None:
        """A claim found jobs: the next one comes at once, and the worker is not idle."""
        self.pause, self.idle_since = FIRST_IDLE_PAUSE, None

    def empty(self, *, listening: bool, busy: bool) -> float | None:
        """A claim found nothing: the seconds to wait before the next; None to exit."""
        wait = self.poll_interval if listening else self.pause
        if busy:
            self.idle_since = None  # handlers still running: not idle
        elif self.exit_when_idle is not None:
            self.idle_since = self.idle_since or time.monotonic()
            left = self.idle_since + self.exit_when_idle - time.monotonic()
            if left <= 0:
                log.info("no work for %.1fs: exiting", self.exit_when_idle)
                return None
            wait = min(wait, left)
        self._next_pause()
        return wait

    def _next_pause(self) -> float:
        pause, self.pause = self.pause, min(self.pause * 2, self.poll_interval)
        return pause


class AsyncClaimer(Claiming[AsyncQueue, AsyncHoldings]):
    """Claims as many jobs as there are free tasks (plus prefetch: `prefetch`, or by
    default the sync claimer's `auto_prefetch` of the handlers' mean time), of the
    registry's kinds only (W2, R23); waits out an outage; exits after `exit_when_idle`.
    Idle, it polls, backing off to `poll_interval`, or waits that long at once while
    `listening()` (a NOTIFY sets `holdings.wake` then, W6)."""

    async def run(self) -> None:
        holdings = self.holdings
        pacing = ClaimPacing(self.poll_interval, self.exit_when_idle, self.observer)
        while not holdings.stopping.is_set():
            holdings.wake.clear()
            active = active_limit(self.slots, self.prefetch, holdings.handler_seconds)
            room = room_for_claims(
                active, active + self.ack_batch, held=len(holdings.leases), acking=holdings.acking
            )
            if room <= 0:
                await holdings.wake.wait()  # a task frees up, or stop()
                continue
            try:
                jobs = await self.queue.claim(
                    self.name, limit=room, queues=self.queues, kinds=self.kinds
                )
            except Exception as exc:
                await wait_for(holdings.stopping, pacing.failed(exc))
                continue
            self.observer.claimed(len(jobs))
            if jobs:
                await holdings.hand_out(jobs)
                pacing.claimed()
                self.unserved.busy()
                continue
            await self.unserved.check_async(self.queue.stats)
            # A NOTIFY sets `wake` when a job comes: while one can, wait the whole interval.
            wait = pacing.empty(listening=self.listening(), busy=holdings.busy())
            if wait is None:
                return
            await wait_for(holdings.wake, wait)
