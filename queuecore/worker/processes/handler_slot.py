"""A worker's slot whose handlers run in a handler process of its own (W7; the messages
are described in `queuecore.worker.processes.handler_processes`).

The slot keeps its handler process a job or a few (`jobs_ahead`) ahead of the one it
runs, so the child goes from one job to the next without waiting for its supervisor:
the claim, the hand-over and the report of one job overlap the handler of the next,
instead of a round trip through two processes and four threads between any two jobs
(ADR 0008). The outcomes come back in order, each for the oldest job still out.

What a crash costs stays what W7 promises: the child writes the number of each job into
a word it shares with the worker before starting it, so once it died the slot knows the
one job it took with it (failed at once, the exit named); the jobs sent after that one
never started and are given back uncharged (R14), as on a stop (W4).

The slot also stops a handler it no longer waits for (W8, W9; `queuecore.worker.time_limits`):
at its time limit, or a cancel grace after its lease was lost, it kills the handler
process, and the death is then that job's, with the reason as its error (a job the
process had only just started when the kill landed is given back uncharged). A job that
cannot be sent to the process at all (a payload too deep to pickle, W10) fails alone,
naming the cause; the slot goes on.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import signal
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

from queuecore.executors.hotpath import connect_per_call
from queuecore.handling import Lease, Raised
from queuecore.observe.observer import WorkerObserver
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.handler_processes import ForkServer, HandlerProcessError
from queuecore.worker.processes.messages import (
    JobCompleting,
    JobsUnstarted,
    Lost,
    Message,
    Stop,
    job_ended,
    receive,
    send,
)
from queuecore.worker.processes.shared import RUNNING
from queuecore.worker.processes.slot_rules import (
    COMMITTING_EFFECT,
    RUNNING_HANDLER,
    WATCH_SLICE,
    abandon_child,
    died_while,
    jobs_ahead,
    send_jobs,
)
from queuecore.worker.reporter import Reporter
from queuecore.worker.time_limits import NO_LIMITS, StopClock, TimeLimits

#: A handler running this long (or LONG_FACTOR times the mean, when that is longer)
#: gives the jobs queued behind it back to the other slots, and its slot takes none
#: ahead until it returns: a slow job never holds short ones while a slot is free.
LONG_SECONDS = 0.25
LONG_FACTOR = 20


def running_long(oldest: Sent, holdings: Holdings) -> bool:
    """Whether the job a handler process runs has run long enough that the jobs behind
    it should go to another slot."""
    mean = holdings.handler_seconds or 0.0
    return time.monotonic() - oldest.started > max(LONG_SECONDS, LONG_FACTOR * mean)


@dataclass(slots=True)
class Sent:
    """A job sent to the handler process, by its number there."""

    number: int
    lease: Lease
    started: float = 0.0  # time.monotonic() when it became the oldest job out
    told_lost: bool = False
    doing: str = RUNNING_HANDLER  # or COMMITTING_EFFECT, once the child said so
    clock: StopClock | None = None  # its time limit and cancel grace, if any


@dataclass(frozen=True, slots=True)
class Killed:
    """The slot killed its handler process to stop the job numbered `number`, `why`."""

    number: int
    why: str


@dataclass(slots=True)
class Child:
    pid: int
    conn: Connection
    running: mmap.mmap  # RUNNING: the number of the job it started last
    numbers: Iterator[int]


class HandlerProcess:
    """One slot's handler process, forked again after it died."""

    slots = 1

    def __init__(self, server: ForkServer, limits: TimeLimits = NO_LIMITS) -> None:
        self.server = server
        self.limits = limits
        self._child: Child | None = None
        self._killed: Killed | None = None
        self._abandoned = False

    @property
    def started(self) -> bool:
        return self._child is not None

    def start(self) -> None:
        """Fork a handler process and wait until it runs, so no claimed job waits for that."""
        pid, conn, running = self.server.fork_running()
        self._child = Child(pid, conn, running, itertools.count(1))

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """The slot: jobs until stopping. A handler process that is not started (at first,
        or after it died) is started before the slot takes its next job, and counts as
        starting meanwhile, so that no job is claimed for it (the worker counted it
        before the slot's first start)."""
        connect_per_call()  # a slot's reports are few: no connection of its own per slot
        pending = not self.started  # counted as starting by the worker, not yet started
        try:
            while not self._abandoned:
                if not self.started:
                    if not pending:
                        holdings.starting(1)
                        pending = True
                    try:
                        self.start()
                    finally:
                        holdings.starting(-1)
                        pending = False
                if not self._run_jobs(holdings, reporter, observer):
                    return
        finally:
            if pending:
                holdings.starting(-1)
            self.close()

    def abandon(self) -> None:
        """Kill the handler process (the worker exits past its grace, W4); its death,
        seen next, reports nothing: its job waits for its lease."""
        self._abandoned = True
        child = self._child
        if child is not None:
            abandon_child(child.pid)

    def close(self) -> None:
        """Stop the handler process: it exits when its socket closes."""
        child, self._child = self._child, None
        if child is not None:
            child.conn.close()
            child.running.close()
            with contextlib.suppress(HandlerProcessError):
                self.server.wait(child.pid)

    def _run_jobs(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> bool:
        """Until stopped (False) or the handler process died (True, every job it held
        reported or given back)."""
        assert self._child is not None, "start() first"
        child = self._child
        out: deque[Sent] = deque()  # sent, outcome not yet back: the oldest runs
        stopped = False  # the child was told to give back its unstarted jobs, for good
        asked_back = False  # ... or for now, a long handler running ahead of them
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
                        sent = [self._sent(next(child.numbers), lease) for lease in more]
                        idle = not out
                        # Out before sent: if the child died meanwhile, the send fails
                        # and these jobs are given back with the rest, not forgotten
                        # under leases this worker would renew for ever.
                        out.extend(sent)
                        self._send_jobs(child, sent, out, reporter)
                        if idle and out:
                            self._begin(out[0], observer)
                for s in out:
                    if s.lease.lost.is_set() and not s.told_lost:
                        send(child.conn, Lost(s.number))
                        s.told_lost = True
                if out and self._killed is None:
                    self._stop_if_due(child, out[0])
                if child.conn.poll(WATCH_SLICE):
                    message = receive(child.conn)
                    if isinstance(message, JobsUnstarted):  # the last ones sent, on a Stop
                        given = [out.pop().lease for _ in message.tickets][::-1]
                        if stopped or not holdings.hand_back(given):
                            for lease in given:
                                reporter.release(lease)
                        asked_back = False
                    else:
                        self._receive(message, out, holdings, reporter, observer)
        except (EOFError, OSError):
            pass
        self._died(child, out, reporter, observer)
        return True

    def _sent(self, number: int, lease: Lease) -> Sent:
        return Sent(number, lease, clock=self.limits.clock(lease.job.kind))

    @staticmethod
    def _send_jobs(child: Child, sent: list[Sent], out: deque[Sent], reporter: Reporter) -> None:
        """The jobs in one message, or one by one where that cannot be pickled (W10);
        a job that cannot go at all fails alone, naming why."""
        by_ticket = {s.number: s for s in sent}

        def refused(ticket: int, failed: Raised) -> None:
            s = by_ticket[ticket]
            out.remove(s)
            reporter.report(s.lease, failed, time.monotonic())

        send_jobs(
            lambda message: send(child.conn, message),
            [(s.number, s.lease.job) for s in sent],
            refused,
        )

    def _stop_if_due(self, child: Child, running: Sent) -> None:
        """Kill the handler process once the job it runs is past its time limit, or past
        the cancel grace after its lease was lost (W8, W9); its death, seen next, is then
        that job's, failed with `why`."""
        clock = running.clock
        if clock is None:
            return
        why = clock.why_stop(running.started, running.lease.lost.is_set(), time.monotonic())
        if why is None:
            return
        self._killed = Killed(running.number, why)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)

    def _more(self, holdings: Holdings, out: int) -> list[Lease] | None:
        """The jobs to send now: none needed, or the next ones claimed (waiting for one
        when the child has none); None once stopping."""
        ahead = jobs_ahead(holdings.handler_seconds)
        if out:  # with enough at hand, wait until several can go in one message
            return [] if 2 * out > ahead + 1 else holdings.more_waiting(ahead + 1 - out)
        return holdings.take(ahead + 1)  # checked in one read (W9)

    @staticmethod
    def _begin(sent: Sent, observer: WorkerObserver) -> None:
        sent.started = time.monotonic()
        observer.handler_started(sent.lease.job)

    def _receive(
        self,
        message: Message,
        out: deque[Sent],
        holdings: Holdings,
        reporter: Reporter,
        observer: WorkerObserver,
    ) -> None:
        """A job's outcome, for the oldest job out: a handler process runs them in order."""
        if isinstance(message, JobCompleting):  # a heartbeat finding it done is no loss
            out[0].lease.reporting = True
            out[0].doing = COMMITTING_EFFECT
            return
        ticket, outcome, seconds = job_ended(message)
        sent = out.popleft()
        assert sent.number == ticket, (sent.number, message)
        observer.handler_ended(sent.lease.job, seconds)
        holdings.ran(seconds)
        if out:
            self._begin(out[0], observer)
        reporter.report(sent.lease, outcome, time.monotonic() - seconds)

    def _died(
        self, child: Child, out: deque[Sent], reporter: Reporter, observer: WorkerObserver
    ) -> None:
        """Every message it sent was read: the oldest job out is the one it ran, if its
        number is the last it wrote; any other never started."""
        self._child = None
        child.conn.close()
        (running,) = RUNNING.unpack_from(child.running)
        child.running.close()
        if self._abandoned:  # the worker exits: its fork server reaps the child
            return
        code = self.server.wait(child.pid)
        killed, self._killed = self._killed, None
        if out:
            first = out[0]
            observer.handler_ended(first.lease.job, time.monotonic() - first.started)
        for sent in out:
            if sent.number != running:
                reporter.release(sent.lease)
                continue
            if killed is not None:
                if killed.number != running:  # it had just started when the kill landed
                    reporter.release(sent.lease)
                    continue
                stopped = Raised(f"{killed.why} (its handler process, pid {child.pid}, was killed)")
                reporter.report(sent.lease, stopped, sent.started)
                continue
            crashed = died_while(child.pid, code, sent.doing)
            reporter.report(sent.lease, crashed, sent.started)
