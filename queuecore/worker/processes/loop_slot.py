"""The worker's side of an event-loop handler process (ADR 0011; the child's side is
`queuecore.worker.processes.loop_child`): a worker whose registry holds `async def`
handlers sends all its jobs to one process whose loop runs up to `--concurrency` of them at once.

One thread, the feeder, keeps that process a few jobs ahead of its free tasks, several
to a message, so that a task that ends finds its next job there instead of waiting for
a round trip through the worker (the sync slots' handler processes do the same, ADR
0008). A reader thread takes the child's messages, hands each outcome to a reporting
thread and tells the child of a lost lease. The child's socket closing is its death,
seen at once: every job whose handler had begun in it is failed then with an error
naming the exit (W7: they were all running in the process that died); a job sent but
not yet begun was not running there, and goes back to the holdings for the next
process, its attempt uncharged. On a stop (W4) the child gives back the jobs it has not
begun, and they are released.

The reader also stops a handler it no longer waits for (W8, W9;
`queuecore.worker.time_limits`): at its time limit, or a cancel grace after its lease was
lost, it asks the child to cancel the job's task (`Cancel`), and the job fails with the
reason. A task that
has not ended `CANCEL_WAIT` later (it swallows the cancel, or it is a sync handler on a
thread, which nothing can cancel) gets its loop process killed: its job fails with `why`,
and the process's other running jobs are failed as a crash's (W7), naming the reason.
A batch of jobs that cannot be pickled is sent one by one; a job that cannot go at all
(W10: a payload nested too deep) fails alone, naming the cause.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from queuecore.executors.hotpath import connect_per_call
from queuecore.handling import Crashed, Lease, Outcome, Raised
from queuecore.observe.observer import WorkerObserver
from queuecore.observe.worklog import log
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.handler_processes import ForkServer
from queuecore.worker.processes.messages import (
    Cancel,
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
    unwire,
)
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
from queuecore.worker.time_limits import CANCEL_WAIT, NO_LIMITS, StopClock, TimeLimits

#: How often the reader looks for jobs past their time limit or cancel grace.
STOP_CHECK = 0.05


@dataclass(eq=False, slots=True)
class Sent:
    """A job sent to the loop process, until its outcome (or the process's end) is known."""

    lease: Lease
    conn: Connection
    begun: float | None = None  # time.monotonic() when the child said its handler began
    told_lost: bool = False
    doing: str = RUNNING_HANDLER  # or COMMITTING_EFFECT, once the child said so
    clock: StopClock | None = None  # its time limit and cancel grace, if any
    stopping: tuple[float, str] | None = None  # when the child was asked to cancel it, why


@dataclass(slots=True)
class Roles:
    """What the feeder and the reader work for: the worker's, given to `serve`."""

    holdings: Holdings
    reporter: Reporter
    observer: WorkerObserver
    reports: ThreadPoolExecutor


class LoopProcess:
    """The handler process of all `slots` slots of one worker, forked again after it died."""

    def __init__(self, server: ForkServer, *, slots: int, limits: TimeLimits = NO_LIMITS) -> None:
        self.server = server
        self.slots = slots
        self.limits = limits
        self._killed: dict[Connection, Sent] = {}  # the job a process was killed to stop
        self._next_check = 0.0  # when _stop_due looks at the jobs out again
        self._lock = threading.Lock()  # the process's socket and the jobs out
        self._room = threading.Condition(self._lock)  # a job came back, or the process died
        self._send = threading.Lock()  # one message at a time on the socket
        self._conn: Connection | None = None
        self._pid = 0  # the loop process's, while it runs
        self._abandoned = False
        self._out: dict[int, Sent] = {}  # by ticket: the same job may be out twice
        self._tickets = itertools.count()
        self._reader: threading.Thread | None = None
        self._roles: Roles | None = None

    @property
    def started(self) -> bool:
        return self._conn is not None

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """The feeder, until stopping. While the loop process is not up (at first, or after
        it died) it is started before more jobs are sent, and its slots count as starting
        meanwhile, so that no job is claimed for them (the worker counted them before the
        first start)."""
        # Reports are few per slot: their threads keep no connection of their own each.
        connect_per_call()
        reports = ThreadPoolExecutor(
            self.slots, thread_name_prefix="queuecore-report", initializer=connect_per_call
        )
        self._roles = Roles(holdings, reporter, observer, reports)
        pending = not self.started  # counted as starting by the worker, not yet started
        try:
            while not self._abandoned:
                if not self.started:
                    if not pending:
                        holdings.starting(self.slots)
                        pending = True
                    try:
                        self._start()
                    finally:
                        holdings.starting(-self.slots)
                        pending = False
                if not self._feed(holdings):
                    break
            self._finish()
        finally:
            if pending:
                holdings.starting(-self.slots)
            self._close()
            reports.shutdown(wait=True)  # every outcome reported before the worker's exit

    def _start(self) -> None:
        pid, conn, running = self.server.fork_running()
        running.close()  # a handler process's word: the loop process reports by message
        self._tell(conn, Slots(self.slots))
        with self._lock:
            self._conn, self._pid = conn, pid
        self._reader = threading.Thread(
            target=self._read, args=(pid, conn), name="queuecore-from-loop", daemon=True
        )
        self._reader.start()

    def _wants_more(self, holdings: Holdings) -> bool:
        """Whether to send more jobs now: once fewer than half the jobs kept ahead of its
        tasks wait in the process (a free task always among them), so that several go
        in one message."""
        ahead = jobs_ahead(holdings.handler_seconds)
        return len(self._out) - self.slots < max(1, ahead // 2)

    def _feed(self, holdings: Holdings) -> bool:
        """Send the claimed jobs while the process runs and has room for them: False
        once stopping, True when the process died (the caller starts another)."""
        while True:
            with self._lock:
                while (
                    self._conn is not None
                    and not self._wants_more(holdings)
                    and not holdings.stopping.is_set()
                ):
                    self._room.wait(WATCH_SLICE)
                conn = self._conn
                room = self.slots + jobs_ahead(holdings.handler_seconds) - len(self._out)
            if conn is None:
                return True
            leases = holdings.take(max(1, room))  # checked in one read (W9)
            if leases is None:
                return False
            with self._lock:
                if self._conn is not conn:  # it died meanwhile: they were never sent
                    self._give_back(leases)
                    return True
                jobs = []
                for lease in leases:
                    ticket = next(self._tickets)
                    clock = self.limits.clock(lease.job.kind)
                    self._out[ticket] = Sent(lease, conn, clock=clock)
                    jobs.append((ticket, lease.job))
            # Out before sent: if the child died meanwhile, its reader finds them out
            # and gives them back with the rest.
            self._send_jobs(conn, jobs)

    def _send_jobs(self, conn: Connection, jobs: list[tuple[int, Any]]) -> None:
        """The jobs in one message, or one by one where that cannot be pickled (W10); a
        job that cannot go at all fails alone, naming why."""

        def refused(ticket: int, failed: Raised) -> None:
            with self._lock:
                sent = self._out.pop(ticket, None)
                self._room.notify_all()
            if sent is not None:
                assert self._roles is not None
                self._report(self._roles.reporter.report, sent.lease, failed, time.monotonic())

        send_jobs(lambda message: self._tell(conn, message), jobs, refused)

    def _finish(self) -> None:
        """Stopping: the child gives back the jobs it has not begun; wait for the rest."""
        with self._lock:
            conn = self._conn
            if conn is None or not self._out:
                return
        self._tell(conn, Stop())
        with self._lock:
            while self._conn is conn and self._out:
                self._room.wait(WATCH_SLICE)

    def abandon(self) -> None:
        """Kill the loop process (the worker exits past its grace, W4); its death, seen
        next, reports nothing: its jobs wait for their leases."""
        with self._lock:
            self._abandoned = True
            pid = self._pid if self._conn is not None else 0
        if pid:
            abandon_child(pid)

    def _close(self) -> None:
        """Stop the process (it exits when its socket closes) and wait for the reader
        thread to reap it."""
        with self._lock:
            conn, reader = self._conn, self._reader
        if conn is None:
            return
        # shutdown, not close: it wakes the reader blocked in poll() and tells the child
        sock = socket.socket(fileno=conn.fileno())
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.detach()
        if reader is not None:
            reader.join()

    def _tell(self, conn: Connection, message: Message) -> None:
        """Send to the process; a dead one's reader thread ends the jobs out."""
        with self._send, contextlib.suppress(OSError):
            send(conn, message)

    def _give_back(self, leases: list[Lease]) -> None:
        """Jobs the process never began: to the next process, or released once stopping."""
        assert self._roles is not None
        if leases and not self._roles.holdings.hand_back(leases):
            for lease in leases:
                self._report(self._roles.reporter.release, lease)

    def _report(self, report: Callable[..., None], *args: Any) -> None:
        """On a reporting thread, so a report waiting out an outage holds up neither the
        child's other messages nor its death; one that fails (a bug: outcomes are
        reported until the database takes them) stops the worker, as a failed slot does."""
        assert self._roles is not None
        holdings = self._roles.holdings

        def failed(future: Future[None]) -> None:
            if future.exception() is not None:
                log.error("a report failed (%r): stopping the worker", future.exception())
                holdings.stopping.set()
                holdings.wake.set()

        self._roles.reports.submit(report, *args).add_done_callback(failed)

    def _read(self, pid: int, conn: Connection) -> None:
        """The child's messages, until it dies; then the jobs that had begun in it are
        crashed, and the rest given back."""
        connect_per_call()
        try:
            while True:
                if conn.poll(WATCH_SLICE):
                    for message in conn.recv():
                        self._take(unwire(message))
                self._tell_lost(conn)
                self._stop_due(pid, conn)
        except (EOFError, OSError):
            pass
        with self._lock:
            if self._conn is conn:
                self._conn = None
            orphans = [t for t, sent in self._out.items() if sent.conn is conn]
            ended = [self._out.pop(t) for t in orphans]
            self._room.notify_all()
        killed = self._killed.pop(conn, None)
        conn.close()
        if self._abandoned:  # the worker exits: its fork server reaps the child
            return
        code = self.server.wait(pid)
        assert self._roles is not None
        roles = self._roles
        self._give_back([sent.lease for sent in ended if sent.begun is None])
        for sent in ended:
            if sent.begun is None:
                continue
            roles.observer.handler_ended(sent.lease.job, time.monotonic() - sent.begun)
            crashed: Outcome
            if sent is killed and sent.stopping is not None:
                why = sent.stopping[1]
                crashed = Raised(
                    f"{why} (its task did not end when cancelled: its handler process, "
                    f"pid {pid}, was killed)"
                )
            elif killed is not None:
                crashed = Crashed(
                    f"its handler process (pid {pid}) was killed while running {sent.doing}, "
                    f"to stop job {killed.lease.job.id}, whose task did not end when cancelled"
                )
            else:
                crashed = died_while(pid, code, sent.doing)
            self._report(roles.reporter.report, sent.lease, crashed, sent.begun)

    def _take(self, message: Message) -> None:
        assert self._roles is not None
        roles = self._roles
        if isinstance(message, JobsStarted):
            now = time.monotonic()
            with self._lock:
                begun = [self._out[t] for t in message.tickets if t in self._out]
            for sent in begun:
                sent.begun = now
                roles.observer.handler_started(sent.lease.job)
            return
        if isinstance(message, JobsUnstarted):  # on a Stop: the jobs it had not begun
            with self._lock:
                given = [self._out.pop(t) for t in message.tickets if t in self._out]
                self._room.notify_all()
            for sent in given:
                self._report(roles.reporter.release, sent.lease)
            return
        if isinstance(message, JobCancelled):  # stopped by its limit or grace: fails with why
            with self._lock:
                sent = self._out.pop(message.ticket)
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
                sent = self._out[message.ticket]
            sent.lease.reporting = True
            sent.doing = COMMITTING_EFFECT
            return
        ticket, outcome, seconds = job_ended(message)
        with self._lock:
            sent = self._out.pop(ticket)
            self._room.notify()
        roles.holdings.ran(seconds)
        roles.observer.handler_ended(sent.lease.job, seconds)
        since = sent.begun if sent.begun is not None else time.monotonic() - seconds
        if roles.reporter.waits_for_nothing(outcome):
            roles.reporter.report(sent.lease, outcome, since)
        else:
            self._report(roles.reporter.report, sent.lease, outcome, since)

    def _stop_due(self, pid: int, conn: Connection) -> None:
        """Ask the child to cancel each task past its time limit or cancel grace (W8,
        W9), and kill the process when one has not ended `CANCEL_WAIT` after that.
        Looked at every `STOP_CHECK` seconds, not at every message: the reader runs once
        per batch of outcomes, and the limits need no finer grain than that."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + STOP_CHECK
        with self._lock:
            running = [
                (t, s) for t, s in self._out.items() if s.clock is not None and s.begun is not None
            ]
        for ticket, sent in running:
            if sent.stopping is None:
                assert sent.clock is not None and sent.begun is not None
                why = sent.clock.why_stop(sent.begun, sent.lease.lost.is_set(), now)
                if why is not None:
                    sent.stopping = (now, why)
                    self._tell(conn, Cancel(ticket))
            elif now - sent.stopping[0] >= CANCEL_WAIT and conn not in self._killed:
                self._killed[conn] = sent
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _tell_lost(self, conn: Connection) -> None:
        with self._lock:
            lost = [
                (t, s) for t, s in self._out.items() if s.lease.lost.is_set() and not s.told_lost
            ]
        for ticket, sent in lost:
            sent.told_lost = True
            self._tell(conn, Lost(ticket))
