"""The worker's side of an event-loop handler process (ADR 0011; the child's side is
`queuecore.worker.processes.loop_child`; what this slot shares with a handler process's
is in `queuecore.worker.processes.child_slot`): a worker whose registry holds `async def`
handlers sends all its jobs to one process whose loop runs up to `--concurrency` of them
at once.

One thread feeds that process and reads it, as a handler process's slot does: it keeps
the process a few jobs ahead of its free tasks, several to a message, so that a task
that ends finds its next job there instead of waiting for a round trip through the
worker (ADR 0008), and it takes the process's outcomes as they come. While it waits on
the socket with a task free, the worker's holdings ring it (a pipe it polls with the
socket) when the next job is claimed, so that job goes at once. Reports that may wait on
the database go through threads of their own, so an outage holds up neither the
process's other messages nor its death. The process begins its jobs in the order they
were sent, and writes the ticket of the last one begun into the word it shares with
the worker before their handlers run: when it dies, the jobs out up to that ticket are
the ones it took with it (W7), and the rest go back uncharged. A task past its time
limit or cancel grace (W8, W9) is cancelled first (`Cancel`), and its process killed
`CANCEL_WAIT` later if it has not ended (it swallows the cancel, or it is a sync handler
on a thread, which nothing can cancel).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from queuecore.executors.hotpath import connect_per_call
from queuecore.handling import Lease, Outcome, Raised
from queuecore.job import Job
from queuecore.observe.observer import WorkerObserver
from queuecore.observe.worklog import log
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.child_slot import Child, ChildSlot, Sent
from queuecore.worker.processes.handler_processes import ForkServer
from queuecore.worker.processes.messages import (
    Cancel,
    Inbox,
    JobCancelled,
    JobCompleting,
    JobsUnstarted,
    Lost,
    Message,
    Slots,
    Stop,
    job_ended,
    send,
    unwire_all,
)
from queuecore.worker.processes.shared import RUNNING
from queuecore.worker.processes.slot_rules import (
    COMMITTING_EFFECT,
    WATCH_SLICE,
    jobs_ahead,
    send_jobs,
)
from queuecore.worker.reporter import Reporter
from queuecore.worker.time_limits import CANCEL_WAIT, NO_LIMITS, TimeLimits

#: How often the slot looks for jobs past their time limit or cancel grace.
STOP_CHECK = 0.05


@dataclass(eq=False, slots=True)
class LoopChild(Child):
    """The loop process, with the jobs sent to it, by ticket."""

    out: dict[int, Sent] = field(default_factory=dict)  # in the order sent and begun
    seen: int = 0  # the last ticket the slot saw begun there


class Doorbell:
    """A pipe the slot polls beside the process's socket; the holdings ring it when a
    job waits for a slot, or the worker stops."""

    def __init__(self) -> None:
        self.read_end, self._write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        os.set_blocking(self._write_end, False)

    def ring(self) -> None:
        with contextlib.suppress(BlockingIOError):  # rung already, and not yet heard
            os.write(self._write_end, b"\0")

    def heard(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.read_end, 4096)

    def close(self) -> None:
        os.close(self.read_end)
        os.close(self._write_end)


class LoopProcess(ChildSlot[LoopChild]):
    """The handler process of all `slots` slots of one worker, forked again after it died."""

    ask_first = CANCEL_WAIT
    asked_text = "its task did not end when cancelled: "

    def __init__(self, server: ForkServer, *, slots: int, limits: TimeLimits = NO_LIMITS) -> None:
        super().__init__(server, limits)
        self.slots = slots
        self._next_check = 0.0  # when _stop_due looks at the jobs out again
        self._reports: ThreadPoolExecutor | None = None
        self._bell: Doorbell | None = None
        self._poller: Any = None  # select.poll() on the socket and the bell

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """The slot, until stopping; reports that may wait go through a pool of threads
        of its own, every one done before this returns."""
        # Reports are few per slot: their threads keep no connection of their own each.
        self._reports = ThreadPoolExecutor(
            self.slots, thread_name_prefix="queuecore-report", initializer=connect_per_call
        )
        self._bell = Doorbell()
        try:
            super().serve(holdings, reporter, observer)
        finally:
            self._reports.shutdown(wait=True)  # every outcome reported before the worker's exit
            holdings.stop_ringing()
            self._bell.close()

    def _start(self) -> None:
        pid, conn, running = self.server.fork_running()
        child = LoopChild(pid, conn, inbox=Inbox(conn.fileno()), running=running)
        send(child.conn, Slots(self.slots))
        assert self._bell is not None
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)
        self._poller.register(self._bell.read_end, select.POLLIN)
        self._child = child

    def _run(self, holdings: Holdings) -> bool:
        """Until stopped (False) or the process died (True, every job it held reported
        or given back)."""
        assert self._child is not None and self._roles is not None, "start() first"
        child = self._child
        stopped = False  # the process was told to give back the jobs it has not begun
        try:
            while True:
                if stopped or holdings.stopping.is_set():
                    if not child.out:
                        return False
                    if not stopped:
                        send(child.conn, Stop())
                        stopped = True
                elif not self._feed(child, holdings):
                    continue  # stopping: the process gives back what it has not begun
                self._tell_lost(child)
                self._stop_due_now(child)
                if self._wait(child, holdings):
                    self._read(child)
                self._note_begun(child)
        except (EOFError, OSError):
            pass
        self._died(child)
        return True

    def _feed(self, child: LoopChild, holdings: Holdings) -> bool:
        """Send the process the jobs it has room for: waiting for one when it has none,
        and otherwise once fewer than half the jobs kept ahead of its tasks wait there
        (a free task always among them), so that several go in one message. False once
        stopping."""
        ahead = jobs_ahead(holdings.handler_seconds)
        room = self.slots + ahead - len(child.out)
        if not child.out:
            leases = holdings.take(max(1, room))  # checked in one read (W9)
            if leases is None:
                return False
        elif len(child.out) - self.slots < max(1, ahead // 2):
            leases = holdings.more_waiting(room)
        else:
            return True
        if leases:
            free = self.slots - len(child.out)  # tasks there that begin these at once
            jobs: list[tuple[int, Job]] = []
            for lease in leases:
                ticket = next(child.tickets)
                clock = self.limits.clock(lease.job.kind)
                child.out[ticket] = Sent(ticket, lease, clock=clock)
                jobs.append((ticket, lease.job))
            # Out before sent: if the process died meanwhile, the send fails and these
            # jobs are given back with the rest.
            self._send_jobs(child, jobs)
            for ticket, _ in jobs[: max(0, free)]:  # as the slot sees it: the word says for sure
                sent = child.out.get(ticket)  # not one that could not be sent (W10)
                if sent is not None:
                    self._begin(sent)
        return True

    def _wait(self, child: LoopChild, holdings: Holdings) -> bool:
        """Wait for the process's next message (True), up to WATCH_SLICE; with a task
        free there, a job claimed meanwhile, or a stop, ends the wait too (False)."""
        assert self._bell is not None
        free = len(child.out) < self.slots and not holdings.stopping.is_set()
        if free and not holdings.ring_when_waiting(self._bell.ring):
            return child.readable(0)  # a job waits already: send it first
        woken = self._poller.poll(WATCH_SLICE * 1000)
        if any(fd == self._bell.read_end for fd, _ in woken):
            self._bell.heard()
        return any(fd == child.conn.fileno() for fd, _ in woken)

    def _send_jobs(self, child: LoopChild, jobs: list[tuple[int, Job]]) -> None:
        """The jobs in one message, or one by one where that cannot be pickled (W10); a
        job that cannot go at all fails alone, naming why."""

        def refused(ticket: int, failed: Raised) -> None:
            sent = child.out.pop(ticket)
            assert self._roles is not None
            self._report(self._roles.reporter.report, sent.lease, failed, time.monotonic())

        send_jobs(lambda message: send(child.conn, message), jobs, refused)

    def _ask_to_stop(self, child: LoopChild, sent: Sent) -> None:
        with contextlib.suppress(OSError):  # a dead process's death is seen next
            send(child.conn, Cancel(sent.ticket))

    def _report(self, report: Callable[..., None], *args: Any) -> None:
        """On a reporting thread, so a report waiting out an outage holds up neither the
        process's other messages nor its death; one that fails (a bug: outcomes are
        reported until the database takes them) stops the worker, as a failed slot does."""
        assert self._roles is not None and self._reports is not None
        holdings = self._roles.holdings

        def failed(future: Future[None]) -> None:
            if future.exception() is not None:
                log.error("a report failed (%r): stopping the worker", future.exception())
                holdings.stopping.set()
                holdings.wake.set()

        self._reports.submit(report, *args).add_done_callback(failed)

    def _read(self, child: LoopChild) -> None:
        """The process's messages waiting on its socket: the completions among them go
        to the ack window together."""
        assert child.inbox is not None and self._roles is not None
        ended: list[tuple[Lease, Outcome, float]] = []
        for frame in child.inbox.frames():
            for message in unwire_all(frame):
                self._take(child, message, ended)
        if ended:
            self._roles.reporter.report_all(ended)

    def _take(
        self, child: LoopChild, message: Message, ended: list[tuple[Lease, Outcome, float]]
    ) -> None:
        assert self._roles is not None
        roles = self._roles
        if isinstance(message, JobsUnstarted):  # on a Stop: the jobs it had not begun
            for ticket in message.tickets:
                self._report(roles.reporter.release, child.out.pop(ticket).lease)
            return
        if isinstance(message, JobCancelled):  # stopped by its limit or grace: fails with why
            sent = child.out.pop(message.ticket)
            roles.observer.handler_ended(sent.lease.job, message.seconds)
            why = sent.stopping[1] if sent.stopping is not None else "cancelled"
            since = sent.begun if sent.begun is not None else time.monotonic() - message.seconds
            failed = Raised(f"{why} (its task was cancelled)")
            self._report(roles.reporter.report, sent.lease, failed, since)
            return
        if isinstance(message, JobCompleting):  # a heartbeat finding it done is no loss
            sent = child.out[message.ticket]
            sent.lease.reporting = True
            sent.doing = COMMITTING_EFFECT
            return
        ticket, outcome, seconds = job_ended(message)
        sent = child.out.pop(ticket)
        if sent.begun is None:  # it began and ended since the slot last looked
            self._begin(sent)
        roles.holdings.ran(seconds)
        roles.observer.handler_ended(sent.lease.job, seconds)
        since = sent.begun if sent.begun is not None else time.monotonic() - seconds
        if roles.reporter.waits_for_nothing(outcome):
            ended.append((sent.lease, outcome, since))
        else:
            self._report(roles.reporter.report, sent.lease, outcome, since)

    def _note_begun(self, child: LoopChild) -> None:
        """The jobs the process began since the slot last looked (the shared word): their
        time limits run from now, as the slot sees it."""
        assert child.running is not None
        (last,) = RUNNING.unpack_from(child.running)
        if last == child.seen:
            return
        child.seen = last
        for sent in child.out.values():
            if sent.ticket > last:
                break
            if sent.begun is None:
                self._begin(sent)

    def _begin(self, sent: Sent) -> None:
        assert self._roles is not None
        sent.begun = time.monotonic()
        sent.lease.began = True
        self._roles.observer.handler_started(sent.lease.job)

    def _stop_due_now(self, child: LoopChild) -> None:
        """Looked at every `STOP_CHECK` seconds, not at every message: the slot looks up
        once per batch of outcomes, and the limits need no finer grain than that."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + STOP_CHECK
        self._stop_due(child, [s for s in child.out.values() if s.clock is not None])

    def _tell_lost(self, child: LoopChild) -> None:
        for sent in child.out.values():
            if sent.lease.is_lost and not sent.told_lost:
                sent.told_lost = True
                send(child.conn, Lost(sent.ticket))

    def _died(self, child: LoopChild) -> None:
        """Every message it sent was read: the jobs out up to the ticket it wrote last
        into the shared word are the ones it took with it, but for those it noted there
        as returned, their outcomes not sent; those and the jobs it never began go back
        uncharged (W7)."""
        out = list(child.out.values())
        child.out.clear()
        self._buried(child, out, lambda sent, last: sent.ticket <= last)
