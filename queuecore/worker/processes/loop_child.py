"""The child side of a handler process that runs an event loop (ADR 0011): for a registry
that holds `async def` handlers, the worker's fork server forks one such process, and
the worker sends it all its jobs; it runs up to `--concurrency` of them at once as tasks
of its loop (sync handlers of the same registry on its thread pool), the others waiting
here unbegun. `queuecore.worker.processes.loop_slot` is the worker's side.

The worker names each job by a ticket it gave it (the same job may be held twice, by an
old lease and a new one); the messages are `queuecore.worker.processes.messages`'s. The
jobs begin in the order they were sent, so, before their handlers run, this process
writes the ticket of the last one begun into the word of memory it shares with the
worker (RUNNING), as a handler process does: once it died, the jobs out up to that
ticket are the ones it took with it, the others go back uncharged (W7). So the outcomes
need not travel at once: several go in one message, and the worker's process is woken
once for them, not once a job; meanwhile their tickets are in the shared memory too,
and should this process die first, those jobs go back uncharged (their handlers had
returned). Only an `async def` handler's task is
cancelled (`Cancel`, for its time limit or cancel grace, W8, W9): a sync handler's
thread cannot be, and the worker kills this process when the job has not ended shortly
after.

A job whose handler returns an effect is completed here, on this process's `AsyncQueue`,
as in a sync handler process (an effect is a closure, and cannot be sent; R10).

The loop reads the worker's messages itself (`add_reader`: no thread between), and the
worker's socket closing (its end, even by SIGKILL) ends this process as soon as the loop
looks, which is at once unless a handler blocks the loop. Only the loop's thread sends.
SIGTERM and SIGINT are ignored, as by every handler process (W4).
"""

from __future__ import annotations

import asyncio
import mmap
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, TypeVar

from queuecore.core import tracing
from queuecore.executors.reconnect import CONNECT_BACK, CONNECT_LOST, report_later
from queuecore.handling import Handler, Raised, Returned
from queuecore.job import Job
from queuecore.worker.async_handling import AsyncLease, async_outcome_of, is_async_handler
from queuecore.worker.processes.messages import (
    Cancel,
    JobCancelled,
    JobCompleted,
    JobCompleting,
    JobReturned,
    Jobs,
    JobsUnstarted,
    Lost,
    Message,
    Ready,
    Slots,
    Stop,
    job_raised,
    receive,
    send,
    send_together,
)
from queuecore.worker.processes.shared import (
    RETURNED_MOST,
    RUNNING,
    log,
    note_returned,
    outcomes_sent,
)

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

T = TypeVar("T")
#: Threads for sync handlers: never more than the jobs the worker sends at once, which
#: its slots (`--concurrency`) bound; this only caps a pool that grows on demand.
SYNC_HANDLER_THREADS = 1024
#: Outcomes kept for one message are sent once RETURNED_MOST wait, or as many as the
#: jobs waiting here to begin (the worker then sends more before this process runs
#: dry), or OUTBOX_SECONDS after the first, whichever comes first: a job's end reaches
#: the worker no later than that.
OUTBOX_SECONDS = 0.001


class LoopServing:
    """The loop: up to `slots` handlers at once (the worker says how many), the jobs sent
    beyond those waiting here, unbegun, in the order they came."""

    def __init__(
        self,
        conn: Connection,
        shared: mmap.mmap,
        handlers: Mapping[str, Handler],
        config: Any,
    ) -> None:
        self.conn = conn
        self.shared = shared  # RUNNING, and the jobs returned whose outcomes wait here
        self.handlers = handlers
        self.config = config
        self.max_result_bytes: int = config["max_result_bytes"]
        self.queue: AsyncQueue | None = None
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(SYNC_HANDLER_THREADS, thread_name_prefix="queuecore-sync")
        self.slots = 1
        self.waiting: deque[tuple[int, AsyncLease]] = deque()
        self.active: dict[int, AsyncLease] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}  # by ticket, held until done
        self.cancelled: set[int] = set()  # tickets the worker asked to cancel
        self.outbox: list[Message] = []  # to the worker, several to a message
        self.flushing: asyncio.Handle | None = None  # the outbox's next send, when set

    def run(self) -> None:
        send(self.conn, Ready())  # its queue is opened for the first effect, not before
        self.loop.add_reader(self.conn.fileno(), self.read)
        self.loop.run_forever()  # until the worker's socket closes: read() ends the process

    def read(self) -> None:
        """The worker's messages waiting on the socket, read by the loop itself (no
        thread to hop through); its end ends this process."""
        try:
            while self.conn.poll():
                self.take(receive(self.conn))
        except (EOFError, OSError):
            tracing.flush()
            os._exit(0)

    def take(self, message: Message) -> None:
        if isinstance(message, Jobs):
            self.waiting.extend((ticket, AsyncLease(job)) for ticket, job in message.jobs)
            self.begin()
        elif isinstance(message, Lost):
            lease = self.active.get(message.ticket)
            for ticket, waiting in self.waiting:
                if ticket == message.ticket:
                    lease = waiting
            if lease is not None:
                lease.mark_lost()
        elif isinstance(message, Cancel):
            self.cancel(message.ticket)
        elif isinstance(message, Stop):  # give back what has not begun (W4)
            self.outbox.append(JobsUnstarted([ticket for ticket, _ in self.waiting]))
            self.waiting.clear()
            self.flush()
        elif isinstance(message, Slots):  # right after Ready
            self.slots = message.tasks

    def begin(self) -> None:
        """Start waiting jobs while a slot is free. The last one's ticket is in the
        shared word before any of them runs: a handler that kills this process at once
        is then charged with it, and a job not begun is not (W7)."""
        begun: list[int] = []
        while self.waiting and len(self.active) < self.slots:
            ticket, lease = self.waiting.popleft()
            self.active[ticket] = lease
            begun.append(ticket)
        if not begun:
            return
        RUNNING.pack_into(self.shared, 0, begun[-1])
        for ticket in begun:
            # Held until done: the loop keeps only weak references to tasks.
            self.tasks[ticket] = self.loop.create_task(self.serve(ticket, self.active[ticket]))

    def cancel(self, ticket: int) -> None:
        """Stop a running `async def` handler's task (W8, W9). A sync handler runs on a
        thread nothing can stop: its task is left, and the worker kills this process."""
        lease, task = self.active.get(ticket), self.tasks.get(ticket)
        if lease is None or task is None:
            return  # it ended meanwhile: its outcome is on its way
        handler = self.handlers.get(lease.job.kind)
        if handler is not None and is_async_handler(handler):
            self.cancelled.add(ticket)
            lease.mark_lost()
            task.cancel()

    def tell(self, ticket: int, message: Message) -> None:
        """A job's outcome, to the worker with others in one message: sent after this
        pass of the loop once enough wait, else OUTBOX_SECONDS later. Until then its
        ticket is in the shared memory, so that, should this process die meanwhile, the
        job is given back uncharged, not failed with it: its handler had returned (W7)."""
        if len(self.outbox) == RETURNED_MOST:
            self.flush()
        note_returned(self.shared, len(self.outbox), ticket)
        self.outbox.append(message)
        soon = len(self.outbox) >= min(RETURNED_MOST, len(self.waiting) + 1)
        if soon and isinstance(self.flushing, asyncio.TimerHandle):
            self.flushing.cancel()  # sent after this pass instead
            self.flushing = None
        if self.flushing is None:
            if soon:
                self.flushing = self.loop.call_soon(self.flush)
            else:
                self.flushing = self.loop.call_later(OUTBOX_SECONDS, self.flush)

    def flush(self) -> None:
        """Send what the outbox holds now."""
        if self.flushing is not None:
            self.flushing.cancel()
            self.flushing = None
        if self.outbox:
            messages, self.outbox = self.outbox, []
            send_together(self.conn, messages)
            outcomes_sent(self.shared)

    async def serve(self, ticket: int, lease: AsyncLease) -> None:
        started = time.monotonic()
        try:
            try:
                outcome = await async_outcome_of(
                    self.handlers, lease, self.pool, max_result_bytes=self.max_result_bytes
                )
            except asyncio.CancelledError:
                if ticket not in self.cancelled:
                    raise
                outcome = None
            if ticket in self.cancelled or outcome is None:  # even if it swallowed the cancel
                self.outbox.append(JobCancelled(ticket, time.monotonic() - started))
                self.flush()  # at once: the job is failed for its limit, even should this die
            elif isinstance(outcome, Raised):
                self.tell(ticket, job_raised(ticket, outcome, time.monotonic() - started))
            elif outcome.effect is None:  # the result (a JSON value) travels back
                self.tell(ticket, JobReturned(ticket, outcome.result, time.monotonic() - started))
            else:
                await self.complete(ticket, lease.job, outcome, started)
        finally:
            del self.active[ticket]
            self.tasks.pop(ticket, None)
            self.cancelled.discard(ticket)
            self.begin()

    async def complete(self, ticket: int, job: Job, outcome: Returned, started: float) -> None:
        """Commit the effect with the completion here: a closure cannot be sent (R10)."""
        self.outbox.append(JobCompleting(ticket))
        self.flush()  # before the commit: a crash during it is the effect's, not the handler's
        effect, result = outcome.effect, outcome.result
        try:
            queue = await self.connect()
            done = await until_reachable(lambda: queue.complete(job, effect=effect, result=result))
        except Exception as exc:  # the effect raised (rolled back), or the database did
            failed = Raised.from_exception(exc)
            self.tell(ticket, job_raised(ticket, failed, time.monotonic() - started))
        else:
            self.tell(ticket, JobCompleted(ticket, done, time.monotonic() - started))

    async def open_queue(self) -> AsyncQueue:
        from queuecore.connect import connect_async

        return await connect_async(self.config["dsn"], **self.config["connect_options"])

    async def connect(self) -> AsyncQueue:
        """This process's queue, for the completions with effects: opened for the first
        one (a registry whose handlers return none never needs it, and a process that
        starts quickly has its slots' jobs claimed sooner), and retried until the
        database can be reached (an outage is never the job's failure)."""
        said, began = False, time.monotonic()
        while self.queue is None:
            try:
                self.queue = await self.open_queue()
            except Exception as exc:
                if not said:
                    log.warning(CONNECT_LOST, exc)
                    said = True
                await asyncio.sleep(1.0)
        if said:  # said as the queue says an outage ended
            log.warning(CONNECT_BACK, time.monotonic() - began)
        return self.queue


async def until_reachable(report: Callable[[], Awaitable[T]]) -> T:
    """As every worker's reporter: an outage, or a completion the server keeps rolling
    back (`report_later`), is never the job's failure. The worker ends this process if
    it gives up (a second stop signal)."""
    pause = 0.05
    while True:
        try:
            return await report()
        except Exception as exc:
            if not report_later(exc):
                raise
            log.debug("completing waits for the database (%s)", exc)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
