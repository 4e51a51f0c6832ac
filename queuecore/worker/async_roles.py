"""The async worker's claimer and lease keeper, and the jobs it holds (the twins of
`queuecore.worker.claimer`, `queuecore.worker.leases` and `queuecore.worker.holdings` on one
event loop).

Everything here runs on the worker's loop, so nothing needs a lock; the policies are
the sync worker's own: the ack window's sizing (`room_for_claims`), the claim pauses
(`FIRST_IDLE_PAUSE` doubling to the poll interval), what a heartbeat's answer means
(`heard`), and that an outage is waited out rather than blamed on a job.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from queuecore.executors.reconnect import connection_lost
from queuecore.job import Job
from queuecore.observe.observer import WorkerObserver, why_refused_async
from queuecore.observe.worklog import describe, label, log
from queuecore.worker.async_handling import AsyncLease
from queuecore.worker.claimer import FIRST_IDLE_PAUSE, active_limit
from queuecore.worker.holdings import FRESH_SECONDS, due_for_check, room_for_claims, running_mean
from queuecore.worker.leases import CANCEL_POLL, heard, refusal
from queuecore.worker.unserved import UnservedNotice

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue


async def wait_for(event: asyncio.Event, timeout: float) -> bool:
    """`threading.Event.wait(timeout)` for an `asyncio.Event`: True once set."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:  # TimeoutError itself from 3.11 on
        return event.is_set()
    return True


class AsyncHoldings:
    """Every job held, from its claim until it was reported: waiting for a task,
    running, or with its completion in the ack window."""

    def __init__(self) -> None:
        self.leases: set[AsyncLease] = set()
        self.waiting: deque[AsyncLease] = deque()
        self.acking = 0
        #: The mean time its handlers ran (recent runs weigh most): the claimer's prefetch.
        self.handler_seconds: float | None = None
        self.work = asyncio.Condition()  # a job is waiting, or stopping
        self.wake = asyncio.Event()  # the claimer should look again
        self.stopping = asyncio.Event()

    async def hand_out(self, jobs: list[Job]) -> None:
        async with self.work:
            for job in jobs:
                lease = AsyncLease(job)
                self.leases.add(lease)
                self.waiting.append(lease)
            self.work.notify(len(jobs))

    async def next_waiting(self, queue: AsyncQueue) -> AsyncLease | None:
        """The next claimed job for a free task, still held (W9): one that waited here
        longer than FRESH_SECONDS since its claim (or last check) is read again first
        (`queue.held`), with every other one waiting that long, so a job cancelled
        while claimed ahead is let go, never started. None once stopping."""
        pause = FIRST_IDLE_PAUSE
        while True:
            async with self.work:
                await self.work.wait_for(lambda: self.waiting or self.stopping.is_set())
                if self.stopping.is_set():
                    return None
                lease = self.waiting.popleft()
            held = not lease.lost.is_set()
            now = time.monotonic()
            if held and lease.checked < now - FRESH_SECONDS:
                also = due_for_check(self.waiting, now - FRESH_SECONDS)
                try:
                    held, *others = await queue.held([lease.job] + [o.job for o in also])
                    for other, other_held in zip(also, others, strict=True):
                        other.checked = now
                        if not other_held:
                            other.mark_lost()  # let go, unstarted, when a task takes it
                    lease.checked = now
                except Exception as exc:
                    if not connection_lost(exc):  # an outage is the queue's to log, once
                        log.warning("cannot check %s before it starts (%s)", label(lease), exc)
                    await self._put_back(lease)
                    await wait_for(self.stopping, pause)
                    pause = min(pause * 2, 1.0)
                    continue
            if held:
                lease.handed = time.monotonic()
                return lease
            log.info(
                "%s was cancelled (or its lease ended) while claimed ahead: not started",
                label(lease),
            )
            lease.mark_lost()
            self.let_go(lease)

    async def _put_back(self, lease: AsyncLease) -> None:
        """A job whose check failed goes back to the head of the line (released with
        the rest of the waiting ones if a stop comes meanwhile)."""
        async with self.work:
            self.waiting.appendleft(lease)
            self.work.notify(1)

    def running(self) -> list[AsyncLease]:
        """The jobs handed to a task and not yet being reported, not known lost: whose
        cancel a handler must hear of (W9)."""
        return [
            lease
            for lease in self.leases
            if lease.handed and not lease.reporting and not lease.lost.is_set()
        ]

    async def stop(self) -> list[AsyncLease]:
        """Stop handing out jobs; returns the ones claimed but not started."""
        self.stopping.set()
        self.wake.set()
        async with self.work:
            unstarted = list(self.waiting)
            self.waiting.clear()
            self.work.notify_all()
        return unstarted

    def ran(self, seconds: float) -> None:
        """A handler ran for `seconds`."""
        self.handler_seconds = running_mean(self.handler_seconds, seconds)

    def to_window(self) -> None:
        """A held job's completion went to the ack window: its task is free."""
        self.acking += 1
        self.wake.set()

    def let_go(self, lease: AsyncLease, *, acked: bool = False) -> None:
        self.leases.discard(lease)
        if acked:
            self.acking -= 1
        self.wake.set()

    def busy(self) -> bool:
        return len(self.leases) > self.acking


class AsyncClaimer:
    """Claims as many jobs as there are free tasks (plus prefetch: `prefetch`, or by
    default the sync claimer's `auto_prefetch` of the handlers' mean time), of the
    registry's kinds only (W2, R23); waits out an outage; exits after `exit_when_idle`.
    Idle, it polls, backing off to `poll_interval`, or waits that long at once while
    `listening()` (a NOTIFY sets `holdings.wake` then, W6)."""

    def __init__(
        self,
        queue: AsyncQueue,
        holdings: AsyncHoldings,
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
        self.prefetch = prefetch
        self.ack_batch = ack_batch
        self.poll_interval = poll_interval
        self.exit_when_idle = exit_when_idle
        self.listening = listening
        self.observer = observer
        self.unserved = UnservedNotice(queues, kinds)

    async def run(self) -> None:
        holdings = self.holdings
        pause = FIRST_IDLE_PAUSE
        idle_since: float | None = None
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
                if not connection_lost(exc):  # an outage the queue has logged already
                    log.warning("claim failed (%s); trying again in %.1fs", describe(exc), pause)
                else:
                    self.observer.unreachable()
                await wait_for(holdings.stopping, pause)
                pause = min(pause * 2, self.poll_interval)
                continue
            self.observer.claimed(len(jobs))
            if jobs:
                await holdings.hand_out(jobs)
                pause, idle_since = FIRST_IDLE_PAUSE, None
                self.unserved.busy()
                continue
            await self.unserved.check_async(self.queue.stats)
            # A NOTIFY sets `wake` when a job comes: while one can, wait the whole interval.
            wait = self.poll_interval if self.listening() else pause
            if holdings.busy():
                idle_since = None
            elif self.exit_when_idle is not None:
                idle_since = idle_since or time.monotonic()
                left = idle_since + self.exit_when_idle - time.monotonic()
                if left <= 0:
                    log.info("no work for %.1fs: exiting", self.exit_when_idle)
                    return
                wait = min(wait, left)
            await wait_for(holdings.wake, wait)
            pause = min(pause * 2, self.poll_interval)


async def keep_leases(
    queue: AsyncQueue,
    holdings: AsyncHoldings,
    every: float,
    finished: asyncio.Event,
    observer: WorkerObserver,
) -> None:
    """Until `finished`: W3, a round of heartbeats every `every` seconds; W9, every
    CANCEL_POLL seconds while handlers run, the jobs started since the last round
    noted (`started_at`), and one read of which running jobs are no longer held, so a
    handler hears of a cancel within about that (the async worker's listener hears new
    jobs only)."""
    now = time.monotonic()
    beat, poll = now + every, now + CANCEL_POLL
    while not await wait_for(finished, max(0.0, min(beat, poll) - time.monotonic())):
        now = time.monotonic()
        if now >= poll:
            poll = now + CANCEL_POLL
            await _note_started(queue, holdings)
            await _poll_cancels(queue, holdings, observer)
        if now >= beat:
            beat = now + every
            await _heartbeats(queue, holdings, observer)


async def _heartbeats(queue: AsyncQueue, holdings: AsyncHoldings, observer: WorkerObserver) -> None:
    for lease in list(holdings.leases):
        if lease.lost.is_set():
            continue
        try:
            held = await queue.heartbeat(lease.job)
        except Exception as exc:
            if connection_lost(exc):  # logged by the queue; the next round tries again
                break
            log.warning("heartbeat of %s failed (%s)", label(lease), describe(exc))
            continue
        refused = (
            await why_refused_async(queue, lease.job) if refusal(lease, held) else "lease_lost"
        )
        heard(lease, held, observer, refused)


async def _note_started(queue: AsyncQueue, holdings: AsyncHoldings) -> None:
    """The jobs handed to a task since the last round get `started_at` (W9), in one
    write: a job held ahead shows as such until then."""
    fresh = [lease for lease in holdings.running() if not lease.noted]
    if not fresh:
        return
    try:
        await queue.mark_started([lease.job for lease in fresh])
    except Exception as exc:
        if not connection_lost(exc):  # an outage the queue has logged already
            log.warning("noting the started jobs failed (%s)", describe(exc))
        return
    for lease in fresh:
        lease.noted = True


async def _poll_cancels(
    queue: AsyncQueue, holdings: AsyncHoldings, observer: WorkerObserver
) -> None:
    """The handlers of the running jobs no longer held are told (nothing is read while
    no handler runs)."""
    running = holdings.running()
    if not running:
        return
    try:
        answers = await queue.held([lease.job for lease in running])
    except Exception as exc:
        if not connection_lost(exc):  # an outage the queue has logged already
            log.warning("checking for cancelled jobs failed (%s)", describe(exc))
        return
    for lease, held in zip(running, answers, strict=True):
        if refusal(lease, held) and not lease.lost.is_set():
            heard(lease, held, observer, await why_refused_async(queue, lease.job))
