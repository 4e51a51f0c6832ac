"""The worker (W1 to W6): claims jobs, runs their handlers on N slots, reports each outcome,
keeps leases alive while handlers run, and stops without losing or burning a job.

Threads, and why each exists:
- the claimer asks the queue for as many jobs as there are free slots (plus `prefetch`),
  and waits cheaply when there are none;
- N slots each run one handler at a time, each on its own pooled connection;
- one heartbeat thread extends every held lease about every lease/3 (W3);
- the ack window's thread completes finished jobs in batches (`queuecore.acks`);
- on PostgreSQL, a listener turns NOTIFYs of new jobs into an immediate claim (W6).

`run()` on the main thread leaves that thread nothing to do but wait and receive
SIGTERM/SIGINT: a signal handler can then never interrupt code that holds a lock.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import TypeVar

from queuecore import validate
from queuecore.acks import Ack, AckWindow
from queuecore.handling import (
    DEFAULT_MAX_RESULT_BYTES,
    Done,
    Handler,
    Lease,
    Permanent,
    Retry,
    run_handler,
)
from queuecore.job import Completions, Job
from queuecore.observer import NO_OBSERVER, WorkerObserver
from queuecore.protocol import Listener, Queue
from queuecore.reconnect import connection_lost
from queuecore.schedules import scheduler_threads
from queuecore.sqlqueue import ERROR_TEXT_LIMIT
from queuecore.tracing import handler_span

log = logging.getLogger("queuecore.worker")

FIRST_IDLE_PAUSE = 0.05
LISTEN_PROBE_TIMEOUT = 2.0
LISTEN_SLICE = 0.2
SIGNAL_CHECK_SECONDS = 0.2  # how long a stopping worker may wait for its listener thread

T = TypeVar("T")


class Worker:
    """Runs handlers for the jobs of `queue` until stopped.

    `handlers` maps kind → `fn(job)` (a dict or a `queuecore.Registry`). The handler may
    return an effect `f(conn)`, committed with the completion; it may raise `Permanent`
    or `Retry(seconds)`; any other exception fails the job with its backoff. Inside a
    handler, `queuecore.current_lease().lost` is set once the job was lost (W3).

    Completions wait in an ack window until `ack_batch` of them, or the oldest has waited
    `ack_seconds`, then commit together (one transaction instead of one per job); a job
    in the window keeps its lease, so a crash only makes it run again. `ack_batch=1` or
    `ack_seconds=0` completes each job at once. Held leases never exceed
    `concurrency + prefetch + ack_batch`.

    The queue's connection pool must allow `concurrency + 3` connections at once
    (slots, claimer, heartbeat, ack window); the command line sizes it.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: Mapping[str, Handler],
        *,
        concurrency: int = 1,
        queues: Iterable[str] | None = None,
        name: str | None = None,
        prefetch: int = 0,
        poll_interval: float = 1.0,
        heartbeat_seconds: float | None = None,
        grace_seconds: float = 30.0,
        exit_when_idle: float | None = None,
        ack_batch: int = 100,
        ack_seconds: float = 0.05,
        observer: WorkerObserver = NO_OBSERVER,
    ) -> None:
        if not isinstance(handlers, Mapping):
            raise TypeError(f"handlers must be a mapping of kind -> handler, got {handlers!r}")
        self.queue = queue
        self.handlers = handlers
        self.concurrency = validate.at_least("concurrency", concurrency, 1)
        self.prefetch = validate.at_least("prefetch", prefetch, 0)
        self.queues = None if queues is None else [validate.queue_name(q) for q in queues]
        if self.queues == []:
            raise ValueError("queues must name at least one queue, or be None for all")
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.poll_interval = validate.positive_seconds("poll_interval", poll_interval)
        if heartbeat_seconds is None:
            lease_seconds = getattr(queue, "lease_seconds", None)
            if lease_seconds is None:
                raise ValueError("pass heartbeat_seconds: this queue does not say its lease")
            heartbeat_seconds = lease_seconds / 3
        self.heartbeat_seconds = validate.positive_seconds("heartbeat_seconds", heartbeat_seconds)
        self.grace_seconds = validate.non_negative_seconds("grace_seconds", grace_seconds)
        self.exit_when_idle = (
            None
            if exit_when_idle is None
            else validate.non_negative_seconds("exit_when_idle", exit_when_idle)
        )
        self.ack_batch = validate.at_least("ack_batch", ack_batch, 1)
        self.ack_seconds = validate.non_negative_seconds("ack_seconds", ack_seconds)
        #: True while PostgreSQL notifications wake this worker; polling is then only a fallback.
        self.listening = False
        self.observer = observer  # told what the worker does, e.g. for metrics

        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = {}  # every job held: waiting, running or acking
        self._waiting: deque[Lease] = deque()  # claimed, not yet started
        self._acking = 0  # how many of the held jobs wait in the ack window
        self._acks: AckWindow | None = None  # while serving, unless completing one by one
        self._work = threading.Condition(self._lock)  # a job is waiting, or stopping
        self._wake = threading.Event()  # the claimer should look again
        self._stopping = threading.Event()
        self._hurry = threading.Event()  # a second stop: do not wait for running handlers
        self._finished = threading.Event()  # heartbeat and listener threads end
        self._crash: BaseException | None = None

    # --- running and stopping -------------------------------------------------------

    def run(self) -> None:
        """Work until `stop()`, SIGTERM/SIGINT (on the main thread) or `exit_when_idle`."""
        if threading.current_thread() is not threading.main_thread():
            self._serve()
            return
        previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        try:
            claimer = threading.Thread(target=self._serve_reporting, name="queuecore-claimer")
            claimer.start()
            # Not one long join(): the kernel may hand SIGTERM to any thread (it does when
            # the process was stopped, say), and Python runs the handler only when the main
            # thread next runs bytecode; a blocked join() would wait for ever.
            while claimer.is_alive():
                claimer.join(SIGNAL_CHECK_SECONDS)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._crash is not None:
            raise self._crash

    def stop(self) -> None:
        """Stop claiming, let running handlers finish within the grace period, release the
        jobs not started (W4). A second call stops waiting for running handlers."""
        if self._stopping.is_set():
            self._hurry.set()
            return
        self._stopping.set()
        self._wake.set()
        with self._lock:
            self._work.notify_all()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._stopping.is_set():
            log.warning("%s again: not waiting for running handlers any longer", name)
        else:
            log.info(
                "%s: finishing running jobs (grace %.0fs), then exiting", name, self.grace_seconds
            )
        self.stop()

    def _serve_reporting(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # handed to run(), which raises it on the main thread
            self._crash = exc

    def _serve(self) -> None:
        if self.ack_batch > 1 and self.ack_seconds > 0:
            self._acks = AckWindow(
                self.queue,
                size=self.ack_batch,
                max_wait=self.ack_seconds,
                settle=self._settle,
                persist=self._until_reachable,
            )
            self._acks.start()
        slots = [
            threading.Thread(target=self._slot, name=f"queuecore-slot-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        helpers = [threading.Thread(target=self._heartbeats, name="queuecore-heartbeat")]
        helpers += scheduler_threads(self.queue, self.handlers, self._stopping)  # periodic jobs
        listen = getattr(self.queue, "listen", None)
        if listen is not None:
            helpers.append(
                threading.Thread(target=self._listen, args=(listen,), name="queuecore-listener")
            )
        for thread in slots + helpers:
            thread.daemon = True
            thread.start()
        log.info(
            "worker %s started: %d slot(s), queues %s, heartbeat every %.1fs, %s",
            self.name,
            self.concurrency,
            ",".join(self.queues) if self.queues else "(all)",
            self.heartbeat_seconds,
            f"acks in batches of up to {self.ack_batch} or {self.ack_seconds * 1000:g} ms"
            if self._acks
            else "each job completed at once",
        )
        try:
            self._claim_until_stopped()
        finally:
            self._shut_down(slots)
            self._finished.set()
            for thread in helpers:
                thread.join(timeout=2)
            log.info("worker %s stopped", self.name)

    def _shut_down(self, slots: list[threading.Thread]) -> None:
        self._stopping.set()
        with self._lock:
            unstarted = list(self._waiting)
            self._waiting.clear()
            self._work.notify_all()
        for lease in unstarted:
            self._release(lease)
        deadline = time.monotonic() + self.grace_seconds
        while any(t.is_alive() for t in slots) and not self._hurry.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._hurry.wait(min(left, 0.05))
        if self._acks is not None:
            self._acks.close()  # the finished jobs' completions commit before the exit
        with self._lock:
            abandoned = len(self._leases)
        if abandoned:
            log.warning(
                "%d job(s) still running at exit; their leases will run out and hand them on",
                abandoned,
            )

    # --- claiming ---------------------------------------------------------------------

    def _room(self) -> int:
        """How many jobs to claim: enough to keep the slots (and prefetch) busy, while the
        ack window may hold up to `ack_batch` more leases; a window that grows past that
        (its flush is slow) holds claiming back instead of letting leases pile up."""
        with self._lock:
            return min(
                self.concurrency + self.prefetch - self._active(),
                self.concurrency + self.prefetch + self.ack_batch - len(self._leases),
            )

    def _active(self) -> int:
        """Jobs running or waiting for a slot (the caller holds the lock)."""
        return len(self._leases) - self._acking

    def _claim_until_stopped(self) -> None:
        pause = FIRST_IDLE_PAUSE
        idle_since: float | None = None
        while not self._stopping.is_set():
            self._wake.clear()
            room = self._room()
            if room <= 0:
                self._wake.wait()  # a slot frees up, or stop()
                continue
            try:
                jobs = self.queue.claim(self.name, limit=room, queues=self.queues)
            except Exception as exc:
                if not connection_lost(exc):  # an outage the queue has logged already
                    log.warning("claim failed (%s); trying again in %.1fs", describe(exc), pause)
                else:
                    self.observer.unreachable()
                self._stopping.wait(pause)
                pause = min(pause * 2, self.poll_interval)
                continue
            self.observer.claimed(len(jobs))
            if jobs:
                self._hand_out(jobs)
                pause, idle_since = FIRST_IDLE_PAUSE, None
                continue
            wait = self.poll_interval if self.listening else pause
            with self._lock:
                busy = self._active() > 0
            if busy:
                idle_since = None  # handlers still running: not idle
            elif self.exit_when_idle is not None:
                idle_since = idle_since or time.monotonic()
                left = idle_since + self.exit_when_idle - time.monotonic()
                if left <= 0:
                    log.info("no work for %.1fs: exiting", self.exit_when_idle)
                    return
                wait = min(wait, left)
            self._wake.wait(wait)
            pause = min(pause * 2, self.poll_interval)

    def _hand_out(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                lease = Lease(job)
                self._leases[job.id] = lease
                self._waiting.append(lease)
            self._work.notify(len(jobs))

    # --- running one job --------------------------------------------------------------

    def _slot(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._stopping.is_set():
                    self._work.wait()
                if self._stopping.is_set():
                    return
                lease = self._waiting.popleft()
            handed_on = False
            try:
                handed_on = self._process(lease)
            finally:
                if not handed_on:
                    self._let_go(lease)

    def _let_go(self, lease: Lease, *, acked: bool = False) -> None:
        """The job was reported (or left to its lease): room for another claim."""
        with self._lock:
            del self._leases[lease.job.id]
            if acked:
                self._acking -= 1
        self._wake.set()

    def _process(self, lease: Lease) -> bool:
        """Run the job and report it; True when its completion went to the ack window,
        which lets go of the lease once it flushed."""
        job = lease.job
        started = time.monotonic()
        handler = self.handlers.get(job.kind)
        if handler is None:
            known = ", ".join(sorted(self.handlers)) or "none"
            self._fail(
                lease,
                f"no handler for kind {job.kind!r} in worker {self.name} (it knows: {known})",
                started,
            )
            return False
        self.observer.handler_started(job)
        limit = getattr(self.queue, "max_result_bytes", DEFAULT_MAX_RESULT_BYTES)
        try:
            with handler_span(job):  # OpenTelemetry, when the application traces
                done = run_handler(handler, lease, max_result_bytes=limit)
        except Exception as exc:
            self.observer.handler_ended(job, time.monotonic() - started)
            self._fail(lease, exc, started)
            return False
        self.observer.handler_ended(job, time.monotonic() - started)
        return self._complete(lease, done, started)

    def _complete(self, lease: Lease, done: Done, started: float) -> bool:
        """Every completion goes through here: to the ack window (True), or at once."""
        effect = done.effect
        if self._acks is not None:
            with self._lock:
                self._acking += 1
            self._acks.add(Ack(lease, effect, started, result=done.result))
            self._wake.set()  # the slot is free: claim its next job now, not after the flush
            return True
        lease.reporting = True
        try:
            completed = self._until_reachable(
                lambda: self.queue.complete(lease.job, effect=effect, result=done.result)
            )
        except Exception as exc:  # the effect raised (rolled back), or the database did
            if connection_lost(exc):  # given up on a second stop signal
                log.warning(
                    "%s finished, but the database is out of reach: its lease will hand it on",
                    label(lease),
                )
                return False
            self._fail(lease, exc, started)
            return False
        self._log_completion(lease, completed, started)
        return False

    def _settle(self, batch: list[Ack], outcome: Completions | Exception) -> None:
        """Report what one flush of the ack window did, one log line per job, as one by
        one: an effect that raised fails only its own job; a batch that never committed
        leaves every job to its lease (it runs again), never reported done."""
        self.observer.acks_flushed(len(batch), committed=not isinstance(outcome, Exception))
        for index, ack in enumerate(batch):
            try:
                if isinstance(outcome, Exception):
                    log.error(
                        "%s finished, but its completion did not commit (%s); its lease "
                        "will hand it on",
                        label(ack.lease),
                        describe(outcome),
                    )
                elif index in outcome.errors:
                    self._fail(ack.lease, outcome.errors[index], ack.started)
                else:
                    self._log_completion(ack.lease, outcome[index], ack.started)
            finally:
                self._let_go(ack.lease, acked=True)

    def _log_completion(self, lease: Lease, done: bool, started: float) -> None:
        self.observer.finished(lease.job, "done" if done else "lease_lost")
        if done:
            log.info("%s done in %.3fs", label(lease), time.monotonic() - started)
        else:
            log.warning("%s finished after its lease was lost: result discarded", label(lease))

    def _fail(self, lease: Lease, error: Exception | str, started: float) -> None:
        lease.reporting = True
        text = error if isinstance(error, str) else error_text(error)
        try:
            outcome = self._until_reachable(
                lambda: self.queue.fail(
                    lease.job,
                    text,
                    retry_in=error.seconds if isinstance(error, Retry) else None,
                    permanent=isinstance(error, Permanent),
                )
            )
        except Exception as exc:
            log.error(
                "%s failed (%s), and reporting it failed too (%s); its lease will hand it on",
                label(lease),
                first_line(text),
                describe(exc),
            )
            return
        elapsed = time.monotonic() - started
        self.observer.finished(lease.job, FAILED_OUTCOMES[outcome])
        if outcome is None:
            log.warning("%s failed after its lease was lost: %s", label(lease), first_line(text))
        else:
            what = "queued for a retry" if outcome == "queued" else "dead"
            log.info("%s failed in %.3fs, %s: %s", label(lease), elapsed, what, first_line(text))
        log.debug("%s failure in full:\n%s", label(lease), text)

    def _until_reachable(self, report: Callable[[], T]) -> T:
        """Make a report (complete, fail) until the database takes it. Giving up on an
        outage would blame it on the job: a handler that succeeded reported as failed,
        its attempt spent and its work done again, or the job dead if that was its last
        attempt. Repeating is safe: the fence refuses a report once another claim took
        the job over, and lets a late one land when nobody did (R09). Only a second
        stop signal ends the wait; the queue has logged the outage."""
        pause = FIRST_IDLE_PAUSE
        while True:
            try:
                return report()
            except Exception as exc:
                if not connection_lost(exc) or self._hurry.is_set():
                    raise
            self._hurry.wait(pause)
            pause = min(pause * 2, self.poll_interval)

    def _release(self, lease: Lease) -> None:
        try:
            released = self.queue.release(lease.job)
        except Exception as exc:
            log.warning(
                "%s not released (%s); its lease will hand it on", label(lease), describe(exc)
            )
        else:
            if released:
                log.info("%s released unstarted", label(lease))
        self._let_go(lease)

    # --- keeping leases ---------------------------------------------------------------

    def _heartbeats(self) -> None:
        while not self._finished.wait(self.heartbeat_seconds):
            with self._lock:
                leases = list(self._leases.values())
            for lease in leases:
                if lease.reporting or lease.lost.is_set():
                    continue
                try:
                    held = self.queue.heartbeat(lease.job)
                except Exception as exc:
                    if connection_lost(exc):  # logged by the queue; the next round tries again
                        break
                    log.warning("heartbeat of %s failed (%s)", label(lease), describe(exc))
                    continue
                if held:
                    self.observer.heartbeat(held=True)
                if not held and not lease.reporting:
                    self.observer.heartbeat(held=False)
                    lease.lost.set()
                    log.warning(
                        "%s lost its lease (it ran out and another claim took the job, "
                        "or the job was cancelled)",
                        label(lease),
                    )

    # --- being woken ------------------------------------------------------------------

    def _listen(self, open_listener: Callable[[], Listener | None]) -> None:
        """LISTEN, and LISTEN again on a new connection whenever it is lost, trying every
        poll interval meanwhile (the claimer polls then). A lost LISTEN is said once,
        not at every try, and "listening" again says it is over."""
        said = False  # that LISTEN is lost, since it last worked
        while not self._finished.is_set():
            try:
                listener = open_listener()
            except Exception as exc:
                if not said:
                    log.warning("cannot LISTEN for new jobs (%s); polling", describe(exc))
                    said = True
                self._finished.wait(self.poll_interval)
                continue
            if listener is None:
                return  # this database has no notifications: polling it is
            try:
                if not listener.reaches_itself(LISTEN_PROBE_TIMEOUT):
                    log.warning(
                        "a NOTIFY this worker sent did not reach its own LISTEN (is a "
                        "transaction-mode pooler such as PgBouncer in between?); it will "
                        "poll every %.1fs instead",
                        self.poll_interval,
                    )
                    return
                self.listening = True
                said = False
                self._wake.set()  # the claimer now waits on notifications, not a short pause
                log.info("listening for new jobs; polling every %.1fs too", self.poll_interval)
                while not self._finished.is_set():
                    names = listener.wait(LISTEN_SLICE)
                    if any(self.queues is None or n in self.queues for n in names):
                        self._wake.set()
            except Exception as exc:
                if not said:
                    log.warning("the LISTEN connection failed (%s); polling", describe(exc))
                    said = True
                self._finished.wait(self.poll_interval)
            finally:
                self.listening = False
                listener.close()


SIGNALS = (signal.SIGTERM, signal.SIGINT)
FAILED_OUTCOMES = {"queued": "retried", "dead": "dead", None: "lease_lost"}


def label(lease: Lease) -> str:
    """How a job is named in the log: never its payload, which may hold secrets."""
    job = lease.job
    return (
        f"job {job.id} ({job.kind}, queue {job.queue}, attempt {job.attempts}/{job.max_attempts})"
    )


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def error_text(exc: BaseException) -> str:
    """What a person reading a dead job needs: the exception, then as much of the
    traceback's end (where it was raised) as the stored error has room for."""
    head = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_tb(exc.__traceback__))
    room = ERROR_TEXT_LIMIT - len(head) - 1
    return head if room <= 0 else f"{head}\n{trace[-room:]}"
