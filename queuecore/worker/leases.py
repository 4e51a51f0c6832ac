"""The lease keeper (W3): renews every held lease about every lease/3, on a connection of
its own, and marks a lease lost when the renewal finds the job no longer this worker's,
so the handler can see it (`current_lease().lost`).

On the same thread and connection, every CANCEL_POLL seconds while handlers run, it
asks which of their jobs are no longer held, so a handler hears of a cancel within
about that (W9; on PostgreSQL the cancel's NOTIFY, heard by the worker's listener
through `hear_cancels`, is sooner, and the poll covers a NOTIFY that was missed), and
notes the jobs handed to a slot since (`Queue.mark_started`), so their snapshots tell
them from the jobs held ahead."""

from __future__ import annotations

import threading
import time

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.observe.observer import Refused, WorkerObserver, why_refused
from queuecore.observe.worklog import describe, label, log
from queuecore.protocol import Queue
from queuecore.worker.holdings import Holdings

#: How often a worker asks whether its running jobs were
#: cancelled: a handler hears of a cancel within about this long, plus one read (W9).
CANCEL_POLL = 0.5


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
        now = time.monotonic()
        beat, poll = now + self.every, now + CANCEL_POLL
        while not self.finished.wait(max(0.0, min(beat, poll) - time.monotonic())):
            now = time.monotonic()
            if now >= poll:
                poll = now + CANCEL_POLL
                self._note_started()
                # Where a NOTIFY tells of cancels it is heard sooner; the poll runs all
                # the same, so a cancel whose NOTIFY was missed (a LISTEN connection
                # being replaced, say) is still heard within about CANCEL_POLL.
                self._poll_cancels()
            if now >= beat:
                beat = now + self.every
                self._heartbeats()

    def _heartbeats(self) -> None:
        """A job whose outcome is being reported keeps its lease renewed too (its
        completion may take a while on a busy database); a renewal that then finds it
        gone is that report's."""
        for lease in self.holdings.leases():
            if lease.lost.is_set():
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
        """The jobs handed to a slot since the last round get `started_at` (W9), in one
        write: a job held ahead shows as such until then."""
        fresh = [lease for lease in self.holdings.running() if not lease.noted]
        if not fresh:
            return
        try:
            self.queue.mark_started([lease.job for lease in fresh])
        except Exception as exc:
            if not connection_lost(exc):  # an outage the queue has logged already
                log.warning("noting the started jobs failed (%s)", describe(exc))
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
            if not connection_lost(exc):  # an outage the queue has logged already
                log.warning("checking for cancelled jobs failed (%s)", describe(exc))
            return
        for lease, held in zip(running, answers, strict=True):
            if not held and not lease.lost.is_set():
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
        if lease.job.id in wanted and not lease.lost.is_set():
            heard(lease, False, observer, "cancelled")
