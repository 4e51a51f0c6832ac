"""The lease keeper (W3): renews every held lease about every lease/3, on a connection of
its own, and marks a lease lost when the renewal finds the job no longer this worker's,
so the handler can see it (`current_lease().lost`).

A cancel is heard sooner (W9): on PostgreSQL the cancel's NOTIFY reaches the worker's
listener; elsewhere (or while LISTEN does not work) `watch_cancels` asks, every
CANCEL_POLL seconds while handlers run, which of their jobs are no longer held, in one
read that writes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable

from queuecore.handling import Lease
from queuecore.holdings import Holdings
from queuecore.observer import Refused, WorkerObserver, why_refused
from queuecore.protocol import Queue
from queuecore.reconnect import connection_lost
from queuecore.worklog import describe, label, log

#: How often a worker without notifications asks whether its running jobs were
#: cancelled: a handler hears of a cancel within about this long, plus one read (W9).
CANCEL_POLL = 0.5


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


def watch_cancels(
    queue: Queue,
    holdings: Holdings,
    finished: threading.Event,
    observer: WorkerObserver,
    listening: Callable[[], bool],
) -> None:
    """Until `finished`: every CANCEL_POLL seconds, while handlers run and no NOTIFY
    tells of cancels, one read of which running jobs are no longer held; their handlers
    are told (`lost`). Nothing is read while the worker runs no handler."""
    while not finished.wait(CANCEL_POLL):
        if listening():
            continue
        running = holdings.running()
        if not running:
            continue
        try:
            answers = queue.held([lease.job for lease in running])
        except Exception as exc:
            if not connection_lost(exc):  # an outage the queue has logged already
                log.warning("checking for cancelled jobs failed (%s)", describe(exc))
            continue
        for lease, held in zip(running, answers, strict=True):
            if not held and not lease.lost.is_set():
                refused = why_refused(queue, lease.job) if refusal(lease, False) else "lease_lost"
                heard(lease, False, observer, refused)


def hear_cancels(holdings: Holdings, ids: list[int], observer: WorkerObserver) -> None:
    """A NOTIFY said these jobs were cancelled: the handlers running them hear it (W9).
    A job claimed ahead and not started is marked too, so it is let go without a read
    (the check before it starts would find it anyway)."""
    wanted = set(ids)
    for lease in holdings.leases():
        if lease.job.id in wanted and not lease.lost.is_set():
            heard(lease, False, observer, "cancelled")
