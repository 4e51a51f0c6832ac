"""The worker's side of a handler process, one design for both kinds of child: a
handler process (`queuecore.worker.processes.handler_slot`, one job at a time, one
slot) and the event-loop process (`queuecore.worker.processes.loop_slot`, up to
`--concurrency` jobs at once, as many slots).

What is alike lives here, once:

- the life of the child: started before the slot takes a job, its slots counted as
  starting meanwhile so no job is claimed for them; forked again after it died; killed
  and left to its fork server when the worker exits past its grace (W4);
- the record of a job sent to it (`Sent`), by its ticket there;
- how a handler it no longer waits for is stopped (W8, W9): asked first where the child
  can be asked (a task can be cancelled; a sync handler cannot), then its process killed;
- what its death means for each job out (W7): a job whose handler had begun there is
  failed at once, naming the exit, or the limit it was killed for; a job not begun goes
  back uncharged (R14), to the next child or, once stopping, to the queue.

What differs is what the children differ in. Both write the ticket of the job they
began last into a word they share with the worker, and begin their jobs in the order
sent; a handler process runs one at a time, the loop process many at once; both send several
outcomes together, noting in the shared memory the jobs that returned meanwhile (should
it die first, those go back uncharged).
One thread feeds and reads each; the loop process's slot also waits for a job claimed
while a task is free.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import select
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from queuecore.executors.hotpath import connect_per_call
from queuecore.handling import Crashed, Lease, Outcome, Raised
from queuecore.observe.observer import WorkerObserver
from queuecore.observe.worklog import log
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.handler_processes import ForkServer, HandlerProcessError
from queuecore.worker.processes.messages import Inbox
from queuecore.worker.processes.shared import RUNNING, returned_unsent
from queuecore.worker.processes.slot_rules import RUNNING_HANDLER, abandon_child, died_while
from queuecore.worker.reporter import Reporter
from queuecore.worker.time_limits import NO_LIMITS, StopClock, TimeLimits


@dataclass(eq=False, slots=True)
class Sent:
    """A job sent to a child, until its outcome (or the child's death) is known."""

    ticket: int
    lease: Lease
    begun: float | None = None  # time.monotonic() when its handler began, as the slot saw it
    told_lost: bool = False
    doing: str = RUNNING_HANDLER  # or COMMITTING_EFFECT, once the child said so
    clock: StopClock | None = None  # its time limit and cancel grace, if any
    stopping: tuple[float, str] | None = None  # when it was found past them, and why


@dataclass(eq=False, slots=True)
class Child:
    """One child process, while it runs."""

    pid: int
    conn: Connection
    tickets: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    killed: Sent | None = None  # the job it was killed to stop (W8, W9)
    running: mmap.mmap | None = None  # RUNNING: the ticket of the job it began last
    inbox: Inbox | None = None  # its messages, read from its socket
    _poller: Any = None  # select.poll() on its socket, made at the first wait

    def readable(self, timeout: float) -> bool:
        """Whether a message (or the child's death) waits on its socket, waiting up to
        `timeout` seconds: `Connection.poll` made a selector for every call, 3.9 µs
        against 0.8 µs, and a slot waits once per job."""
        if not hasattr(select, "poll"):
            return self.conn.poll(timeout)
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.conn.fileno(), select.POLLIN)
        return bool(self._poller.poll(timeout * 1000))


@dataclass(slots=True)
class Roles:
    """What a slot works for: the worker's, given to `serve`."""

    holdings: Holdings
    reporter: Reporter
    observer: WorkerObserver


ChildT = TypeVar("ChildT", bound=Child)


class ChildSlot(ABC, Generic[ChildT]):
    """A child process serving `slots` of a worker's slots, forked again after it died.

    A kind of child says how to start one (`_start`), how to run jobs through it until
    stopping or its death (`_run`) and, where it can, how to ask one of its handlers to
    stop (`_ask_to_stop`)."""

    slots: int = 1
    #: How long a handler asked to stop (W8, W9) has to end before its process is
    #: killed: none where the child cannot be asked.
    ask_first: float = 0.0
    #: What the error of a job whose process was killed to stop it says happened first.
    asked_text = ""

    def __init__(self, server: ForkServer, limits: TimeLimits = NO_LIMITS) -> None:
        self.server = server
        self.limits = limits
        self._child: ChildT | None = None
        self._abandoned = False
        self._roles: Roles | None = None

    @property
    def started(self) -> bool:
        return self._child is not None

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """The slot: jobs until stopping. A child that is not started (at first, or
        after it died) is started before the slot takes more jobs, and its slots count
        as starting meanwhile, so that no job is claimed for them (the worker counted
        them before the first start)."""
        connect_per_call()  # a slot's reports are few: no connection of its own per slot
        self._roles = Roles(holdings, reporter, observer)
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
                if not self._run(holdings):
                    return
        finally:
            if pending:
                holdings.starting(-self.slots)
            self._close()

    def abandon(self) -> None:
        """Kill the child (the worker exits past its grace, W4); its death, seen next,
        reports nothing: its jobs wait for their leases."""
        self._abandoned = True
        child = self._child
        if child is not None:
            abandon_child(child.pid)

    @abstractmethod
    def _start(self) -> None:
        """Fork the child and wait until it runs."""

    @abstractmethod
    def _run(self, holdings: Holdings) -> bool:
        """Jobs through the child: False once stopping, True when it died (every job it
        held reported or given back; the caller starts another)."""

    def _close(self) -> None:
        """Stop the child, if it runs: it exits when its socket closes."""
        child, self._child = self._child, None
        if child is not None:
            child.conn.close()
            if child.running is not None:
                child.running.close()
            with contextlib.suppress(HandlerProcessError):
                self.server.wait(child.pid)

    def _ended(self, child: ChildT) -> tuple[int, set[int]]:
        """The child died, every message it sent read: let go of its socket and shared
        memory, and say what that memory held: the ticket of the job it began last, and
        those of the jobs it noted as returned whose outcomes it had not sent (W7)."""
        self._child = None
        child.conn.close()
        assert child.running is not None
        (last,) = RUNNING.unpack_from(child.running)
        returned = returned_unsent(child.running)
        child.running.close()
        child.running = None
        return last, returned

    def _ask_to_stop(self, child: ChildT, sent: Sent) -> None:
        """Ask the child to stop this job's handler (nothing to do where it cannot be
        asked: `ask_first` is then 0, and the process is killed at once)."""

    def _report(self, report: Callable[..., None], *args: Any) -> None:
        """A report or release, on the slot's thread unless a kind says otherwise."""
        report(*args)

    def _give_back(self, leases: list[Lease]) -> bool:
        """Jobs a child never began, uncharged: to the worker's holdings for the next
        child (True), or released once stopping (W4)."""
        assert self._roles is not None
        if not leases:
            return False
        if self._roles.holdings.hand_back(leases):
            return True
        for lease in leases:
            self._report(self._roles.reporter.release, lease)
        return False

    def _stop_due(self, child: ChildT, running: Iterable[Sent]) -> None:
        """Stop each handler past its time limit, or past the cancel grace after its lease
        was lost (W8, W9): asked first where the child can be asked, its process killed
        `ask_first` later if it still runs (at once where it cannot be asked); the
        child's death, seen next, is then that job's, failed with why."""
        now = time.monotonic()
        for sent in running:
            if sent.clock is None or sent.begun is None:
                continue
            if sent.stopping is None:
                why = sent.clock.why_stop(sent.begun, sent.lease.is_lost, now)
                if why is None:
                    continue
                sent.stopping = (now, why)
                self._ask_to_stop(child, sent)
            if child.killed is None and now - sent.stopping[0] >= self.ask_first:
                child.killed = sent
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)

    def _buried(self, child: ChildT, out: list[Sent], began: Callable[[Sent, int], bool]) -> None:
        """The child died with `out` out, every message it sent read. A job it noted in
        the shared memory as returned, its outcome not sent, goes back uncharged to run
        again; of the others, a job whose handler `began` there (given the ticket it
        wrote last into the shared word) fails at once (W7; or with the reason it was
        killed, W8, W9), the rest go back uncharged. Nothing is reported when the worker
        abandoned it (W4): their leases run out."""
        last, returned = self._ended(child)
        if self._abandoned:  # the worker exits: its fork server reaps the child
            return
        assert self._roles is not None
        roles = self._roles
        now = time.monotonic()
        for sent in out:
            if sent.begun is not None:  # the observer was told it started
                roles.observer.handler_ended(sent.lease.job, now - sent.begun)
        unsent = [sent.lease for sent in out if sent.ticket in returned]
        if self._give_back(unsent):
            log.info(
                "%d job(s) had returned in handler process %d, their outcomes not sent: "
                "given back, uncharged",
                len(unsent),
                child.pid,
            )
        ended = [sent for sent in out if sent.ticket not in returned]
        code = self.server.wait(child.pid)
        unstarted = [sent.lease for sent in ended if not began(sent, last)]
        if self._give_back(unstarted):
            log.info(
                "%d job(s) sent to handler process %d had not started: given back, uncharged",
                len(unstarted),
                child.pid,
            )
        for sent in ended:
            if began(sent, last):
                since = sent.begun if sent.begun is not None else now
                failed = self._death(child, code, sent)
                self._report(roles.reporter.report, sent.lease, failed, since)

    def _death(self, child: Child, code: int, sent: Sent) -> Outcome:
        """The failure of a job whose handler had begun in a child that died."""
        killed = child.killed
        if killed is None or killed.stopping is None:
            return died_while(child.pid, code, sent.doing)
        why = killed.stopping[1]
        if sent is killed:
            how = f"{self.asked_text}its handler process, pid {child.pid}, was killed"
            return Raised(f"{why} ({how})")
        return Crashed(
            f"its handler process (pid {child.pid}) was killed while running {sent.doing}, "
            f"to stop job {killed.lease.job.id} ({why})"
        )
