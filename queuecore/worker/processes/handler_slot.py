"""A worker's slot whose handlers run in a handler process of its own (W7; the messages
are in `queuecore.worker.processes.messages`; what this slot shares with the event-loop
process's is in `queuecore.worker.processes.child_slot`).

The slot keeps its handler process a job or a few (`jobs_ahead`) ahead of the one it
runs, so the child goes from one job to the next without waiting for its supervisor:
the claim, the hand-over and the report of one job overlap the handler of the next,
instead of a round trip through two processes and four threads between any two jobs
(ADR 0008). One thread feeds the child and reads it; the outcomes come back in order,
each for the oldest job still out.

The child writes the ticket of each job into a word it shares with the worker before
starting it, so once it died the slot knows the one job it took with it (W7); the jobs
sent after that one never started and go back uncharged (R14), and so do those whose
short handlers had returned there, their outcomes held to go with the next ones and
noted in the same memory. A slot that heard nothing for FLUSH_AFTER while its child
may hold outcomes asks for them (`Flush`): a long handler running behind short ones
holds their outcomes no longer than that. A sync handler cannot be asked to stop: one
past its time limit or cancel grace (W8, W9) has its process killed.
"""

from __future__ import annotations

import time
from collections import deque

from queuecore.handling import Lease, Outcome, Raised
from queuecore.observe.observer import WorkerObserver
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.child_slot import Child, ChildSlot, Sent
from queuecore.worker.processes.messages import (
    Flush,
    Inbox,
    JobCompleting,
    JobsUnstarted,
    Lost,
    Message,
    Stop,
    job_ended,
    send,
)
from queuecore.worker.processes.shared import HOLD_SECONDS
from queuecore.worker.processes.slot_rules import (
    COMMITTING_EFFECT,
    WATCH_SLICE,
    jobs_ahead,
    send_jobs,
)

#: A handler running this long (or LONG_FACTOR times the mean, when that is longer)
#: gives the jobs queued behind it back to the other slots, and its slot takes none
#: ahead until it returns: a slow job never holds short ones while a slot is free.
LONG_SECONDS = 0.25
LONG_FACTOR = 20
#: How long a slot waits for a message, with two jobs or more out to a child that may
#: hold the first one's outcome, before it asks for what the child holds.
FLUSH_AFTER = 0.005


def running_long(oldest: Sent, holdings: Holdings) -> bool:
    """Whether the job a handler process runs has run long enough that the jobs behind
    it should go to another slot."""
    if oldest.begun is None:
        return False
    mean = holdings.handler_seconds or 0.0
    return time.monotonic() - oldest.begun > max(LONG_SECONDS, LONG_FACTOR * mean)


class HandlerProcess(ChildSlot[Child]):
    """One slot's handler process, forked again after it died."""

    def _start(self) -> None:
        """Fork a handler process and wait until it runs, so no claimed job waits for that."""
        pid, conn, running = self.server.fork_running()
        child = Child(pid, conn, running=running, inbox=Inbox(conn.fileno()))
        self._child = child

    def _run(self, holdings: Holdings) -> bool:
        """Until stopped (False) or the handler process died (True, every job it held
        reported or given back)."""
        assert self._child is not None and self._roles is not None, "start() first"
        child = self._child
        reporter, observer = self._roles.reporter, self._roles.observer
        out: deque[Sent] = deque()  # sent, outcome not yet back: the oldest runs
        stopped = False  # the child was told to give back its unstarted jobs, for good
        asked_back = False  # ... or for now, a long handler running ahead of them
        flushed = False  # the child was asked for the outcomes it holds, since it last said
        try:
            while True:
                if stopped:
                    if not out:
                        return False
                elif holdings.stopping.is_set():
                    if not out:
                        return False
                    send(child.conn, Stop())
                    stopped = True
                elif asked_back or (out and running_long(out[0], holdings)):
                    if len(out) > 1 and not asked_back:
                        send(child.conn, Stop())  # the child goes on; its queue comes back
                        asked_back = True
                else:
                    more = self._more(holdings, len(out))
                    if more is None:
                        return False
                    if more:
                        sent = [self._sent(next(child.tickets), lease) for lease in more]
                        idle = not out
                        # Out before sent: if the child died meanwhile, the send fails
                        # and these jobs are given back with the rest, not forgotten
                        # under leases this worker would renew for ever.
                        out.extend(sent)
                        self._send_jobs(child, sent, out)
                        if idle and out:
                            self._begin(out[0], observer)
                for s in out:
                    if s.lease.is_lost and not s.told_lost:
                        send(child.conn, Lost(s.ticket))
                        s.told_lost = True
                if out:
                    self._stop_due(child, (out[0],))
                holding = len(out) > 1 and not flushed and may_hold(holdings)
                if not child.readable(FLUSH_AFTER if holding else WATCH_SLICE):
                    if holding:
                        send(child.conn, Flush())
                        flushed = True
                else:
                    flushed = False
                    assert child.inbox is not None
                    ended: list[tuple[Lease, Outcome, float]] = []
                    for message in child.inbox.read():
                        if isinstance(message, JobsUnstarted):  # the last sent, on a Stop
                            given = [out.pop().lease for _ in message.tickets][::-1]
                            if stopped or not holdings.hand_back(given):
                                for lease in given:
                                    reporter.release(lease)
                            asked_back = False
                        else:
                            self._receive(message, out, holdings, observer, ended)
                    if out and out[0].begun is None:
                        self._begin(out[0], observer)
                    if ended:
                        reporter.report_all(ended)
        except (EOFError, OSError):
            pass
        self._died(child, out)
        return True

    def _sent(self, ticket: int, lease: Lease) -> Sent:
        return Sent(ticket, lease, clock=self.limits.clock(lease.job.kind))

    def _send_jobs(self, child: Child, sent: list[Sent], out: deque[Sent]) -> None:
        """The jobs in one message, or one by one where that cannot be pickled (W10);
        a job that cannot go at all fails alone, naming why."""
        by_ticket = {s.ticket: s for s in sent}
        assert self._roles is not None
        reporter = self._roles.reporter

        def refused(ticket: int, failed: Raised) -> None:
            s = by_ticket[ticket]
            out.remove(s)
            reporter.report(s.lease, failed, time.monotonic())

        send_jobs(
            lambda message: send(child.conn, message),
            [(s.ticket, s.lease.job) for s in sent],
            refused,
        )

    def _more(self, holdings: Holdings, out: int) -> list[Lease] | None:
        """The jobs to send now: none needed, or the next ones claimed (waiting for one
        when the child has none); None once stopping."""
        ahead = jobs_ahead(holdings.handler_seconds)
        if out:  # with enough at hand, wait until several can go in one message
            return [] if 2 * out > ahead + 1 else holdings.more_waiting(ahead + 1 - out)
        return holdings.take(ahead + 1)  # checked in one read (W9)

    @staticmethod
    def _begin(sent: Sent, observer: WorkerObserver) -> None:
        sent.begun = time.monotonic()
        sent.lease.began = True
        observer.handler_started(sent.lease.job)

    def _receive(
        self,
        message: Message,
        out: deque[Sent],
        holdings: Holdings,
        observer: WorkerObserver,
        ended: list[tuple[Lease, Outcome, float]],
    ) -> None:
        """A job's outcome, for the oldest job out (a handler process runs them in
        order), added to `ended` for the reporter; or word that it commits its effect."""
        if isinstance(message, JobCompleting):  # a heartbeat finding it done is no loss
            out[0].lease.reporting = True
            out[0].doing = COMMITTING_EFFECT
            return
        ticket, outcome, seconds = job_ended(message)
        sent = out.popleft()
        assert sent.ticket == ticket, (sent.ticket, message)
        if sent.begun is None:  # it began and ended since the slot last looked
            self._begin(sent, observer)
        observer.handler_ended(sent.lease.job, seconds)
        holdings.ran(seconds)
        ended.append((sent.lease, outcome, time.monotonic() - seconds))

    def _died(self, child: Child, out: deque[Sent]) -> None:
        """Every message it sent was read: the oldest job out is the one it ran, if its
        ticket is the last it wrote into the shared word and it was not noted there as
        returned, its outcome held (those go back uncharged); any other never started."""
        self._buried(child, list(out), lambda sent, running: sent.ticket == running)


def may_hold(holdings: Holdings) -> bool:
    """Whether a handler process may be holding outcomes: its handlers are short, or
    not known yet."""
    mean = holdings.handler_seconds
    return mean is None or mean < HOLD_SECONDS
