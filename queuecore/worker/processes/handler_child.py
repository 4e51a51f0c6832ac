"""A handler process (W7; the worker's side is `queuecore.worker.processes.handler_slot`,
the fork server that starts it `queuecore.worker.processes.fork_server`).

A handler process runs the jobs its worker sends, one at a time and in order, and sends
back what each came to. Its main thread runs handlers; a reader thread takes the worker's
messages, so the next jobs queue up here while one runs, a lost lease reaches
`current_lease().lost` while the handler runs (W3), and the end of the worker (its
socket closing, even by SIGKILL) ends this process at once. Before it starts a job, the
main thread writes the job's number into a word of memory it shares with the worker
(RUNNING): once this process died, that word alone says which job it took with it, and
the jobs after it, which never started, are given back uncharged. SIGTERM and
SIGINT are the worker's to handle (W4): a terminal's Ctrl-C reaches the whole process
group, and the running handler must be let finish within the grace period.

The outcome of a short handler (under HOLD_SECONDS) with more jobs waiting here is held,
to go with the next ones in one message (up to RETURNED_MOST): each message wakes the
worker's slot on the other core, and for short jobs that wake was a job's largest cost
(issue 29). A held outcome's ticket is noted in the shared memory until sent, so should
this process die first, that job goes back uncharged, not failed with the crash of the
next (W7). Nothing is held while this process waits for jobs, and the worker asks for
what is held (`Flush`) when a long handler runs behind short ones.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import TypeVar

from queuecore.core import tracing
from queuecore.executors.reconnect import CONNECT_BACK, CONNECT_LOST, report_later
from queuecore.handling import Handler, Lease, Raised, Returned
from queuecore.job import Job
from queuecore.protocol import Effect, Queue
from queuecore.worker.processes.messages import (
    Flush,
    JobCompleted,
    JobCompleting,
    JobRaised,
    JobReturned,
    Jobs,
    JobsUnstarted,
    Lost,
    Message,
    Stop,
    job_raised,
    pickled,
    receive,
    send_together,
)
from queuecore.worker.processes.shared import (
    HOLD_SECONDS,
    RETURNED_MOST,
    RUNNING,
    log,
    note_returned,
    outcomes_sent,
)
from queuecore.worker.slots import run_in_this_process

T = TypeVar("T")


class Serving:
    """A handler process: its reader thread takes the worker's messages (jobs, sent a few
    ahead so that this process never waits for its supervisor between two of them; a
    lost lease; a stop), its main thread runs the jobs one at a time, in order."""

    def __init__(
        self,
        conn: Connection,
        handlers: Mapping[str, Handler],
        open_queue: Callable[[], Queue],
        max_result_bytes: int,
        running: mmap.mmap,
    ) -> None:
        self.conn = conn
        self.handlers = handlers
        self.max_result_bytes = max_result_bytes
        self.open_queue = open_queue
        self.queue: Queue | None = None
        self.waiting_for_database = False
        self.running = running
        self._sending = threading.Lock()  # both threads send; it guards `_held` too
        self._held: list[Message] = []  # outcomes to go with the next message
        self._ready = threading.Condition()
        self._jobs: deque[tuple[int, Lease]] = deque()  # sent to this process, not started
        self._leases: dict[int, Lease] = {}  # by number, until the job's outcome is sent

    def send(self, message: Message | None = None) -> None:
        """The outcomes held, then `message`, in one message. A worker that went away
        (its end of the pipe closed) ends this process, as `read` does: a reader thread
        that died of the broken pipe instead left the process running, and the worker
        waiting for it at shutdown (seen in CI)."""
        with self._sending:
            held = self._held
            if message is not None:
                held.append(message)
            if not held:
                return
            try:
                if len(held) == 1:
                    self.conn.send_bytes(pickled(held[0]))
                else:
                    send_together(self.conn, held)
            except OSError:  # BrokenPipeError, ConnectionResetError
                tracing.flush()
                os._exit(0)
            self._held = []
            outcomes_sent(self.running)

    def ended(self, number: int, outcome: JobReturned | JobRaised) -> None:
        """A job's outcome: held while more jobs wait here and its handler was short (its
        ticket noted in the shared memory meanwhile, W7), sent otherwise."""
        with self._sending:
            held = len(self._held)
            if outcome.seconds < HOLD_SECONDS and self._jobs and held < RETURNED_MOST - 1:
                note_returned(self.running, held, number)
                self._held.append(outcome)
                return
        self.send(outcome)

    def read(self) -> None:
        """The worker's messages, until it goes away; then this process goes too."""
        while True:
            try:
                message = receive(self.conn)
            except (EOFError, OSError):
                tracing.flush()
                os._exit(0)
            if isinstance(message, Jobs):
                with self._ready:
                    for number, job in message.jobs:
                        lease = self._leases[number] = Lease(job)
                        self._jobs.append((number, lease))
                    self._ready.notify()
            elif isinstance(message, Lost):
                held = self._leases.get(message.ticket)
                if held is not None:
                    held.lost.set()
            elif isinstance(message, Stop):  # the jobs not started go back at once
                with self._ready:  # (W4, or jobs held behind a long one)
                    unstarted = [number for number, _ in self._jobs]
                    for number in unstarted:
                        del self._leases[number]
                    self._jobs.clear()
                self.send(JobsUnstarted(unstarted))
            elif isinstance(message, Flush):
                self.send()

    def serve(self) -> None:
        while True:
            if not self._jobs:
                self.send()  # nothing is held while this process waits
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                number, lease = self._jobs.popleft()
                # Taken and marked under one lock: a stop gives back only what is unmarked,
                # and a death from here on is this job's.
                RUNNING.pack_into(self.running, 0, number)
            started = time.perf_counter()
            outcome = run_in_this_process(self.handlers, lease, self.max_result_bytes)
            if isinstance(outcome, Raised):
                self.ended(number, job_raised(number, outcome, time.perf_counter() - started))
            elif outcome.effect is None:  # the result (a JSON value) travels back
                elapsed = time.perf_counter() - started
                self.ended(number, JobReturned(number, outcome.result, elapsed))
            else:
                self.complete(number, lease.job, outcome, started)
            del self._leases[number]

    def connect(self) -> Queue:
        """This process's own connection, for the completions with effects: opened when
        first needed, so a worker whose handlers return no effect holds none for its
        handler processes; then retried until it can (an outage is never the job's
        failure)."""
        began = time.monotonic()
        while self.queue is None:
            try:
                self.queue = self.open_queue()
            except Exception as exc:
                if not self.waiting_for_database:
                    log.warning(CONNECT_LOST, exc)
                    self.waiting_for_database = True
                time.sleep(1.0)
        if self.waiting_for_database:  # said as the queue says an outage ended
            log.warning(CONNECT_BACK, time.monotonic() - began)
        self.waiting_for_database = False
        return self.queue

    def complete(self, number: int, job: Job, outcome: Returned, started: float) -> None:
        """Commit the effect with the completion here: a closure cannot be sent (R10)."""
        self.send(JobCompleting(number))
        effect: Effect = outcome.effect  # type: ignore[assignment]
        try:
            queue = self.connect()
            done = until_reachable(
                lambda: queue.complete(job, effect=effect, result=outcome.result)
            )
        except Exception as exc:  # the effect raised (rolled back), or the database did
            failed = Raised.from_exception(exc)
            self.send(job_raised(number, failed, time.perf_counter() - started))
        else:
            self.send(JobCompleted(number, done, time.perf_counter() - started))


def until_reachable(report: Callable[[], T]) -> T:
    """As the worker's reporter: an outage, or a completion the server keeps rolling
    back (`report_later`), is never the job's failure. The worker ends this process if
    it gives up (a second stop signal)."""
    pause = 0.05
    while True:
        try:
            return report()
        except Exception as exc:
            if not report_later(exc):
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
