"""The worker's side of an event-loop handler process (ADR 0011; the child's side is
`queuecore.worker.processes.loop_child`; what this slot shares with a handler process's
is in `queuecore.worker.processes.child_slot`): a worker whose registry holds `async def`
handlers sends all its jobs to one process whose loop runs up to `--concurrency` of them
at once.

One thread, the feeder, keeps that process a few jobs ahead of its free tasks, several
to a message, so that a task that ends finds its next job there instead of waiting for
a round trip through the worker (the sync slots' handler processes do the same, ADR
0008). A reader thread takes the child's messages, hands each outcome to a reporting
thread and tells the child of a lost lease. The child says which jobs its tasks began
(`JobsStarted`): when it dies, those are the jobs it took with it (W7), and the rest go
back uncharged. A task past its time limit or cancel grace (W8, W9) is cancelled first
(`Cancel`), and its process killed `CANCEL_WAIT` later if it has not ended (it swallows
the cancel, or it is a sync handler on a thread, which nothing can cancel).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from queuecore.executors.hotpath import connect_per_call
from queuecore.handling import Raised
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
    JobsStarted,
    JobsUnstarted,
    Lost,
    Message,
    Slots,
    Stop,
    job_ended,
    send,
    unwire_all,
)
from queuecore.worker.processes.slot_rules import (
    COMMITTING_EFFECT,
    WATCH_SLICE,
    jobs_ahead,
    send_jobs,
)
from queuecore.worker.reporter import Reporter
from queuecore.worker.time_limits import CANCEL_WAIT, NO_LIMITS, TimeLimits

#: How often the reader looks for jobs past their time limit or cancel grace.
STOP_CHECK = 0.05


@dataclass(eq=False, slots=True)
class LoopChild(Child):
    """The loop process, with the jobs sent to it, by ticket."""

    out: dict[int, Sent] = field(default_factory=dict)
    inbox: Inbox | None = None  # its messages, read from its socket by the reader thread


class LoopProcess(ChildSlot[LoopChild]):
    """The handler process of all `slots` slots of one worker, forked again after it died."""

    ask_first = CANCEL_WAIT
    asked_text = "its task did not end when cancelled: "

    def __init__(self, server: ForkServer, *, slots: int, limits: TimeLimits = NO_LIMITS) -> None:
        super().__init__(server, limits)
        self.slots = slots
        self._next_check = 0.0  # when _stop_due looks at the jobs out again
        self._lock = threading.Lock()  # the running child and its jobs out
        self._room = threading.Condition(self._lock)  # a job came back, or the process died
        self._send = threading.Lock()  # one message at a time on the socket
        self._reader: threading.Thread | None = None
        self._reports: ThreadPoolExecutor | None = None

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """The feeder, until stopping; reports go through a pool of threads of its own,
        every one done before this returns."""
        # Reports are few per slot: their threads keep no connection of their own each.
        self._reports = ThreadPoolExecutor(
            self.slots, thread_name_prefix="queuecore-report", initializer=connect_per_call
        )
        try:
            super().serve(holdings, reporter, observer)
        finally:
            self._reports.shutdown(wait=True)  # every outcome reported before the worker's exit

    def _start(self) -> None:
        pid, conn, running = self.server.fork_running()
        running.close()  # a handler process's word: the loop process reports by message
        child = LoopChild(pid, conn, inbox=Inbox(conn.fileno()))
        self._tell(child, Slots(self.slots))
        with self._lock:
            self._child = child
        self._reader = threading.Thread(
            target=self._read, args=(child,), name="queuecore-from-loop", daemon=True
        )
        self._reader.start()

    def _run(self, holdings: Holdings) -> bool:
        if self._feed(holdings):
            return True
        self._finish()
        return False

    def _wants_more(self, child: LoopChild, holdings: Holdings) -> bool:
        """Whether to send more jobs now: once fewer than half the jobs kept ahead of its
        tasks wait in the process (a free task always among them), so that several go
        in one message."""
        ahead = jobs_ahead(holdings.handler_seconds)
        return len(child.out) - self.slots < max(1, ahead // 2)

    def _feed(self, holdings: Holdings) -> bool:
        """Send the claimed jobs while the process runs and has room for them: False
        once stopping, True when the process died (the caller starts another)."""
        while True:
            with self._lock:
                while (
                    (child := self._child) is not None
                    and not self._wants_more(child, holdings)
                    and not holdings.stopping.is_set()
                ):
                    self._room.wait(WATCH_SLICE)
                if child is None:
                    return True
                room = self.slots + jobs_ahead(holdings.handler_seconds) - len(child.out)
            leases = holdings.take(max(1, room))  # checked in one read (W9)
            if leases is None:
                return False
            with self._lock:
                if self._child is not child:  # it died meanwhile: they were never sent
                    self._give_back(leases)
                    return True
                jobs = []
                for lease in leases:
                    ticket = next(child.tickets)
                    clock = self.limits.clock(lease.job.kind)
                    child.out[ticket] = Sent(ticket, lease, clock=clock)
                    jobs.append((ticket, lease.job))
            # Out before sent: if the child died meanwhile, its reader finds them out
            # and gives them back with the rest.
            self._send_jobs(child, jobs)

    def _send_jobs(self, child: LoopChild, jobs: list[tuple[int, Any]]) -> None:
        """The jobs in one message, or one by one where that cannot be pickled (W10); a
        job that cannot go at all fails alone, naming why."""

        def refused(ticket: int, failed: Raised) -> None:
            with self._lock:
                sent = child.out.pop(ticket, None)
                self._room.notify_all()
            if sent is not None:
                assert self._roles is not None
                self._report(self._roles.reporter.report, sent.lease, failed, time.monotonic())

        send_jobs(lambda message: self._tell(child, message), jobs, refused)

    def _finish(self) -> None:
        """Stopping: the child gives back the jobs it has not begun; wait for the rest."""
        with self._lock:
            child = self._child
            if child is None or not child.out:
                return
        self._tell(child, Stop())
        with self._lock:
            while self._child is child and child.out:
                self._room.wait(WATCH_SLICE)

    def _close(self) -> None:
        """Stop the process (it exits when its socket closes) and wait for the reader
        thread to reap it."""
        with self._lock:
            child, reader = self._child, self._reader
        if child is None:
            return
        # shutdown, not close: it wakes the reader blocked in poll() and tells the child
        sock = socket.socket(fileno=child.conn.fileno())
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.detach()
        if reader is not None:
            reader.join()

    def _tell(self, child: LoopChild, message: Message) -> None:
        """Send to the process; a dead one's reader thread ends the jobs out."""
        with self._send, contextlib.suppress(OSError):
            send(child.conn, message)

    def _ask_to_stop(self, child: LoopChild, sent: Sent) -> None:
        self._tell(child, Cancel(sent.ticket))

    def _report(self, report: Callable[..., None], *args: Any) -> None:
        """On a reporting thread, so a report waiting out an outage holds up neither the
        child's other messages nor its death; one that fails (a bug: outcomes are
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
        """The child's messages, until it dies; then the jobs that had begun in it are
        failed, and the rest given back."""
        connect_per_call()
        try:
            while True:
                if child.readable(WATCH_SLICE):
                    assert child.inbox is not None
                    for frame in child.inbox.frames():
                        for message in unwire_all(frame):
                            self._take(child, message)
                self._tell_lost(child)
                self._stop_due_now(child)
        except (EOFError, OSError):
            pass
        with self._lock:
            if self._child is child:
                self._child = None
            ended = list(child.out.values())
            child.out.clear()
            self._room.notify_all()
        child.conn.close()
        self._buried(child, ended, lambda sent: sent.begun is not None)

    def _take(self, child: LoopChild, message: Message) -> None:
        assert self._roles is not None
        roles = self._roles
        if isinstance(message, JobsStarted):
            now = time.monotonic()
            with self._lock:
                begun = [child.out[t] for t in message.tickets if t in child.out]
            for sent in begun:
                sent.begun = now
                sent.lease.began = True
                roles.observer.handler_started(sent.lease.job)
            return
        if isinstance(message, JobsUnstarted):  # on a Stop: the jobs it had not begun
            with self._lock:
                given = [child.out.pop(t) for t in message.tickets if t in child.out]
                self._room.notify_all()
            for sent in given:
                self._report(roles.reporter.release, sent.lease)
            return
        if isinstance(message, JobCancelled):  # stopped by its limit or grace: fails with why
            with self._lock:
                sent = child.out.pop(message.ticket)
                self._room.notify()
            seconds = message.seconds
            roles.observer.handler_ended(sent.lease.job, seconds)
            why = sent.stopping[1] if sent.stopping is not None else "cancelled"
            since = sent.begun if sent.begun is not None else time.monotonic() - seconds
            self._report(
                roles.reporter.report, sent.lease, Raised(f"{why} (its task was cancelled)"), since
            )
            return
        if isinstance(message, JobCompleting):  # a heartbeat finding it done is no loss
            with self._lock:
                sent = child.out[message.ticket]
            sent.lease.reporting = True
            sent.doing = COMMITTING_EFFECT
            return
        ticket, outcome, seconds = job_ended(message)
        with self._lock:
            sent = child.out.pop(ticket)
            if not child.out or self._wants_more(child, roles.holdings):
                self._room.notify()  # not per job: the feeder would wake to wait again
        roles.holdings.ran(seconds)
        roles.observer.handler_ended(sent.lease.job, seconds)
        since = sent.begun if sent.begun is not None else time.monotonic() - seconds
        if roles.reporter.waits_for_nothing(outcome):
            roles.reporter.report(sent.lease, outcome, since)
        else:
            self._report(roles.reporter.report, sent.lease, outcome, since)

    def _stop_due_now(self, child: LoopChild) -> None:
        """Looked at every `STOP_CHECK` seconds, not at every message: the reader runs
        once per batch of outcomes, and the limits need no finer grain than that."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + STOP_CHECK
        with self._lock:
            running = [s for s in child.out.values() if s.clock is not None]
        self._stop_due(child, running)

    def _tell_lost(self, child: LoopChild) -> None:
        with self._lock:
            lost = [s for s in child.out.values() if s.lease.is_lost and not s.told_lost]
        for sent in lost:
            sent.told_lost = True
            self._tell(child, Lost(sent.ticket))
