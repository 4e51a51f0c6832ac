"""The lease keeper (W3): renews every held lease about every lease/3, on a connection of
its own, and marks a lease lost when the renewal finds the job no longer this worker's,
so the handler can see it (`current_lease().lost`).

On the same thread and connection, every CANCEL_POLL seconds while handlers run, it
asks which of their jobs are no longer held, so a handler hears of a cancel within
about that (W9; on PostgreSQL the cancel's NOTIFY, heard by the worker's listener
through `hear_cancels`, is sooner, and the poll covers a NOTIFY that was missed), and
notes the jobs whose handlers began since (`Queue.mark_started`), so their snapshots tell
them from the jobs held ahead.

The sync worker's `LeaseKeeper` (a thread) and the async one's `keep_leases` (a task)
stand side by side, on one schedule (`Rounds`), with one meaning of a refused
heartbeat (`heard`)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.observe.observer import Refused, WorkerObserver, why_refused, why_refused_async
from queuecore.observe.worklog import describe, label, log
from queuecore.protocol import Queue
from queuecore.worker.async_handling import wait_for
from queuecore.worker.holdings import AsyncHoldings, Holdings

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

#: How often a worker asks whether its running jobs were
#: cancelled: a handler hears of a cancel within about this long, plus one read (W9).
CANCEL_POLL = 0.5


class Rounds:
    """When either worker's lease keeper does what: a round of heartbeats every `every`
    seconds (W3), and every CANCEL_POLL seconds the started jobs noted and the poll for
    cancels (W9)."""

    def __init__(self, every: float) -> None:
        now = time.monotonic()
        self.every = every
        self.beat, self.poll = now + every, now + CANCEL_POLL

    def until_next(self) -> float:
        return max(0.0, min(self.beat, self.poll) - time.monotonic())

    def due(self) -> tuple[bool, bool]:
        """Whether the poll and the heartbeats are due now; each due one is set again."""
        now = time.monotonic()
        poll, beat = now >= self.poll, now >= self.beat
        if poll:
            self.poll = now + CANCEL_POLL
        if beat:
            self.beat = now + self.every
        return poll, beat


L = TypeVar("L", bound=Lease)


def unnoted(running: list[L]) -> list[L]:
    """The running jobs whose handler began and whose start the database was not told
    of yet (W9): a job handed to a handler process ahead of the one it runs is still
    held ahead, and shows as such."""
    return [lease for lease in running if lease.began and not lease.noted]


def say_failed(what: str, exc: Exception) -> None:
    """A round of the lease keeper failed: an outage is the queue's to log, once."""
    if not connection_lost(exc):
        log.warning("%s failed (%s)", what, describe(exc))


class LeaseKeeper:
    def __init__(
        self,
        queue: Queue,
        holdings: Holdings,
        every: float,
        finished: threading.Event,
        observer: WorkerObserver,
    ) -> None:
        self.queue = queue
        self.holdings = holdings
        self.every = every
        self.finished = finished
        self.observer = observer

    def run(self) -> None:
        """Until `finished`: a round of heartbeats every `every` seconds, and the cancel
        poll every CANCEL_POLL seconds."""
        rounds = Rounds(self.every)
        while not self.finished.wait(rounds.until_next()):
            poll, beat = rounds.due()
            if poll:
                self._note_started()
                # Where a NOTIFY tells of cancels it is heard sooner; the poll runs all
                # the same, so a cancel whose NOTIFY was missed (a LISTEN connection
                # being replaced, say) is still heard within about CANCEL_POLL.
                self._poll_cancels()
            if beat:
                self._heartbeats()

    def _heartbeats(self) -> None:
        """A job whose outcome is being reported keeps its lease renewed too (its
        completion may take a while on a busy database); a renewal that then finds it
        gone is that report's."""
        for lease in self.holdings.leases():
            if lease.is_lost:
                continue
            try:
                held = self.queue.heartbeat(lease.job)
            except Exception as exc:
                if connection_lost(exc):  # logged by the queue; the next round tries again
                    break
                log.warning("heartbeat of %s failed (%s)", label(lease), describe(exc))
                continue
            heard(lease, held, self.observer, self._why(lease, held))

    def _note_started(self) -> None:
        """The jobs whose handlers began since the last round get `started_at` (W9), in one
        write: a job held ahead shows as such until then."""
        fresh = unnoted(self.holdings.running())
        if not fresh:
            return
        try:
            self.queue.mark_started([lease.job for lease in fresh])
        except Exception as exc:
            say_failed("noting the started jobs", exc)
            return
        for lease in fresh:
            lease.noted = True

    def _poll_cancels(self) -> None:
        """One read of which running jobs are no longer held: their handlers are told.
        Nothing is read while the worker runs no handler."""
        running = self.holdings.running()
        if not running:
            return
        try:
            answers = self.queue.held([lease.job for lease in running])
        except Exception as exc:
            say_failed("checking for cancelled jobs", exc)
            return
        for lease, held in zip(running, answers, strict=True):
            if not held and not lease.is_lost:
                heard(lease, held, self.observer, self._why(lease, held))

    def _why(self, lease: Lease, held: bool) -> Refused:
        return why_refused(self.queue, lease.job) if refusal(lease, held) else "lease_lost"


def refusal(lease: Lease, held: bool) -> bool:
    """Whether a heartbeat's answer is a loss the handler must hear of (and whose reason
    one read of the row is spent on): False while the outcome is being reported is
    that report's race, not a loss."""
    return not held and not lease.reporting


def heard(lease: Lease, held: bool, observer: WorkerObserver, refused: Refused) -> None:
    """What a heartbeat's answer means, for every worker: the handler is told of a loss
    (`refused` says why: the lease ran out, or the job was cancelled)."""
    if held:
        observer.heartbeat(held=True)
    elif not lease.reporting and lease.mark_lost():
        observer.heartbeat(held=False, refused=refused)
        log.warning(
            "%s lost its lease (it ran out and another claim took the job, or the job "
            "was cancelled)",
            label(lease),
        )


def hear_cancels(holdings: Holdings, ids: list[int], observer: WorkerObserver) -> None:
    """A NOTIFY said these jobs were cancelled: the handlers running them hear it (W9).
    A job claimed ahead and not started is marked too, so it is let go without a read
    (the check before it starts would find it anyway)."""
    wanted = set(ids)
    for lease in holdings.leases():
        if lease.job.id in wanted and not lease.is_lost:
            heard(lease, False, observer, "cancelled")


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
    rounds = Rounds(every)
    while not await wait_for(finished, rounds.until_next()):
        poll, beat = rounds.due()
        if poll:
            await _note_started(queue, holdings)
            await _poll_cancels(queue, holdings, observer)
        if beat:
            await _heartbeats(queue, holdings, observer)


async def _heartbeats(queue: AsyncQueue, holdings: AsyncHoldings, observer: WorkerObserver) -> None:
    for lease in list(holdings.leases):
        if lease.is_lost:
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
    """The jobs whose handlers began since the last round get `started_at` (W9), in one
    write: a job held ahead shows as such until then."""
    fresh = unnoted(holdings.running())
    if not fresh:
        return
    try:
        await queue.mark_started([lease.job for lease in fresh])
    except Exception as exc:
        say_failed("noting the started jobs", exc)
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
        say_failed("checking for cancelled jobs", exc)
        return
    for lease, held in zip(running, answers, strict=True):
        if refusal(lease, held) and not lease.is_lost:
            heard(lease, held, observer, await why_refused_async(queue, lease.job))
