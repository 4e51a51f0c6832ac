"""The lease keeper (W3): renews every held lease about every lease/3, on a connection of
its own, and marks a lease lost when the renewal finds the job no longer this worker's,
so the handler can see it (`current_lease().lost`)."""

from __future__ import annotations

import threading

from queuecore.handling import Lease
from queuecore.holdings import Holdings
from queuecore.observer import Refused, WorkerObserver, why_refused
from queuecore.protocol import Queue
from queuecore.reconnect import connection_lost
from queuecore.worklog import describe, label, log


def keep_leases(
    queue: Queue,
    holdings: Holdings,
    every: float,
    finished: threading.Event,
    observer: WorkerObserver,
) -> None:
    """Until `finished`: one round of heartbeats every `every` seconds. A job whose
    outcome is being reported keeps its lease renewed too (its completion may take a
    while on a busy database); a renewal that then finds it gone is that report's."""
    while not finished.wait(every):
        for lease in holdings.leases():
            if lease.lost.is_set():
                continue
            try:
                held = queue.heartbeat(lease.job)
            except Exception as exc:
                if connection_lost(exc):  # logged by the queue; the next round tries again
                    break
                log.warning("heartbeat of %s failed (%s)", label(lease), describe(exc))
                continue
            refused = why_refused(queue, lease.job) if refusal(lease, held) else "lease_lost"
            heard(lease, held, observer, refused)


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
    elif not lease.reporting:
        observer.heartbeat(held=False, refused=refused)
        lease.mark_lost()
        log.warning(
            "%s lost its lease (it ran out and another claim took the job, or the job "
            "was cancelled)",
            label(lease),
        )
