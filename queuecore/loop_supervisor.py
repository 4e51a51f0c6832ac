"""The worker's side of an event-loop handler process (ADR 0011; the child's side is
`queuecore.loop_process`): every slot of a worker whose registry holds `async def`
handlers sends its job to the one process whose loop runs them all concurrently.

Each slot thread still runs one job at a time and reports it (claims, leases, the ack
window and W4 are the supervising worker's, as in ADR 0008); the slots share this one
`Runner`. A reader thread takes the child's messages to the slots waiting for them. The
child's socket closing is its death, seen at once: every job whose handler had begun in
it is failed then with an error naming the exit (W7: they were all running in the
process that died); a job sent but not yet begun was not running there, and is sent to
the next process instead, its attempt uncharged.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from queuecore.handling import Completed, Crashed, Lease, Outcome, Raised, Returned
from queuecore.holdings import Holdings
from queuecore.observer import WorkerObserver
from queuecore.process_slot import WATCH_SLICE
from queuecore.reporter import Reporter
from queuecore.supervisor import ForkServer, HandlerProcessError, exit_text


@dataclass(eq=False)
class Pending:
    """A job sent to the loop process, until its outcome (or the process's end) is known."""

    lease: Lease
    conn: Connection
    begun: bool = False
    doing: str = "the handler"
    outcome: Outcome | None = None
    ended: threading.Event = field(default_factory=threading.Event)


class LoopProcess:
    """The handler process of all `slots` slots of one worker, forked again after it died."""

    def __init__(self, server: ForkServer, *, slots: int) -> None:
        self.server = server
        self._lock = threading.Lock()  # the process (conn, pid) and the pending jobs
        self._send = threading.Lock()  # one message at a time on the socket
        self._conn: Connection | None = None
        self._pid: int | None = None
        self._pending: dict[int, Pending] = {}
        self._tickets = itertools.count()
        self._slots_open = slots
        self._reader: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._conn is not None

    def start(self) -> None:
        """Fork the loop process unless it runs; the first slot to ask forks it, the
        others find it up (after a crash, every slot asks)."""
        with self._lock:
            if self._conn is not None:
                return
            pid, conn, running = self.server.fork()
            running.close()  # a handler process's word: the loop process reports by message
            try:
                ready = conn.recv()
            except (EOFError, OSError):
                ready = None
            if ready != ("ready",):
                conn.close()
                code = self.server.wait(pid)
                raise HandlerProcessError(
                    f"a handler process (pid {pid}) {exit_text(code)} at start"
                )
            self._pid, self._conn = pid, conn
            self._reader = threading.Thread(
                target=self._read, args=(pid, conn), name="queuecore-from-loop", daemon=True
            )
            self._reader.start()

    def serve(self, holdings: Holdings, reporter: Reporter, observer: WorkerObserver) -> None:
        """One slot: a job at a time, until stopping. While the loop process is not up
        (at first, or after it died) the slot starts it before taking its next job, and
        counts as starting meanwhile, so that no job is claimed for it (the worker counted
        it before the slot's first start)."""
        pending = not self.started  # counted as starting by the worker, not yet started
        try:
            while True:
                if not self.started:
                    if not pending:
                        holdings.starting(1)
                        pending = True
                    try:
                        self.start()
                    finally:
                        holdings.starting(-1)
                        pending = False
                lease = holdings.next_waiting()
                if lease is None:
                    return
                started = time.monotonic()
                observer.handler_started(lease.job)
                try:
                    outcome = self.run(lease)
                except BaseException:
                    holdings.let_go(lease)
                    raise
                finally:
                    seconds = time.monotonic() - started
                    observer.handler_ended(lease.job, seconds)
                    holdings.ran(seconds)
                reporter.report(lease, outcome, started)
        finally:
            if pending:
                holdings.starting(-1)
            self.close()

    def run(self, lease: Lease) -> Outcome:
        while True:
            self.start()
            sent = self._register(lease)
            if sent is None:  # it died since start(): start another
                continue
            pending, ticket = sent
            self._tell(pending.conn, ("job", ticket, lease.job))
            told_lost = False
            while not pending.ended.wait(WATCH_SLICE):
                if lease.lost.is_set() and not told_lost:
                    self._tell(pending.conn, ("lost", ticket))
                    told_lost = True
            if pending.outcome is not None:
                return pending.outcome
            if pending.begun:  # the process died while its handler ran
                return Crashed(pending.doing)  # _read wrote the exit into `doing`
            # Sent, never begun: another job's crash took the process; not this job's.

    def close(self) -> None:
        """Called by each slot as it ends; the last one stops the process (it exits when
        its socket closes) and waits for the reader thread to reap it."""
        with self._lock:
            self._slots_open -= 1
            if self._slots_open > 0 or self._conn is None:
                return
            conn, reader = self._conn, self._reader
        # shutdown, not close: it wakes the reader blocked in recv() and tells the child
        sock = socket.socket(fileno=conn.fileno())
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.detach()
        if reader is not None:
            reader.join()

    def _register(self, lease: Lease) -> tuple[Pending, int] | None:
        with self._lock:
            if self._conn is None:
                return None
            ticket = next(self._tickets)
            pending = self._pending[ticket] = Pending(lease, self._conn)
            return pending, ticket

    def _tell(self, conn: Connection, message: tuple[object, ...]) -> None:
        """Send to the process; a dead one's reader thread ends the waiting jobs."""
        with self._send, contextlib.suppress(OSError):
            conn.send(message)

    def _read(self, pid: int, conn: Connection) -> None:
        """The child's messages to the slots waiting for them, until it dies; then the
        jobs that had begun in it are crashed, and the rest sent again."""
        try:
            while True:
                message = conn.recv()
                with self._lock:
                    pending = self._pending.get(message[1])
                if pending is None:
                    continue
                kind = message[0]
                if kind == "started":
                    pending.begun = True
                    continue
                if kind == "completing":  # a heartbeat finding it done is no loss
                    pending.lease.reporting = True
                    pending.doing = "the handler's effect (the completion did not commit)"
                    continue
                if kind == "returned":
                    pending.outcome = Returned(result=message[2])
                elif kind == "raised":
                    pending.outcome = Raised(*message[2:])
                else:  # "completed"
                    pending.outcome = Completed(message[2])
                self._end(message[1])
        except (EOFError, OSError):
            pass
        with self._lock:
            if self._conn is conn:
                self._pid = self._conn = None
            orphans = [t for t, p in self._pending.items() if p.conn is conn]
        conn.close()
        code = self.server.wait(pid)
        for ticket in orphans:
            pending = self._pending[ticket]
            pending.doing = (
                f"its handler process (pid {pid}) {exit_text(code)} while running {pending.doing}"
            )
            self._end(ticket)

    def _end(self, ticket: int) -> None:
        with self._lock:
            pending = self._pending.pop(ticket)
        pending.ended.set()
