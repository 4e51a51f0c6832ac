"""The worker (W1 to W6): claims jobs, runs their handlers on N slots, reports each outcome,
keeps leases alive while handlers run, and stops without losing or burning a job.

Threads, and why each exists:
- the claimer asks the queue for as many jobs as there are free slots (plus `prefetch`),
  and waits cheaply when there are none;
- N slots each run one handler at a time, each on its own pooled connection;
- one heartbeat thread extends every held lease about every lease/3 (W3);
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
from queuecore.handling import Handler, Lease, Permanent, Retry, run_handler
from queuecore.job import Job
from queuecore.protocol import Effect, Listener, Queue
from queuecore.reconnect import connection_lost
from queuecore.sqlqueue import ERROR_TEXT_LIMIT

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

    The queue's connection pool must allow `concurrency + 2` connections at once
    (slots, claimer, heartbeat); the command line sizes it.
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
        #: True while PostgreSQL notifications wake this worker; polling is then only a fallback.
        self.listening = False

        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = {}  # every job held: running or waiting for a slot
        self._waiting: deque[Lease] = deque()  # claimed, not yet started
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
        slots = [
            threading.Thread(target=self._slot, name=f"queuecore-slot-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        helpers = [threading.Thread(target=self._heartbeats, name="queuecore-heartbeat")]
        listen = getattr(self.queue, "listen", None)
        if listen is not None:
            helpers.append(
                threading.Thread(target=self._listen, args=(listen,), name="queuecore-listener")
            )
        for thread in slots + helpers:
            thread.daemon = True
            thread.start()
        log.info(
            "worker %s started: %d slot(s), queues %s, heartbeat every %.1fs",
            self.name,
            self.concurrency,
            ",".join(self.queues) if self.queues else "(all)",
            self.heartbeat_seconds,
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
        with self._lock:
            abandoned = len(self._leases)
        if abandoned:
            log.warning(
                "%d job(s) still running at exit; their leases will run out and hand them on",
                abandoned,
            )

    # --- claiming ---------------------------------------------------------------------

    def _room(self) -> int:
        with self._lock:
            return self.concurrency + self.prefetch - len(self._leases)

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
                self._stopping.wait(pause)
                pause = min(pause * 2, self.poll_interval)
                continue
            if jobs:
                self._hand_out(jobs)
                pause, idle_since = FIRST_IDLE_PAUSE, None
                continue
            wait = self.poll_interval if self.listening else pause
            if self._room() < self.concurrency + self.prefetch:
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
            try:
                self._process(lease)
            finally:
                with self._lock:
                    del self._leases[lease.job.id]
                self._wake.set()

    def _process(self, lease: Lease) -> None:
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
            return
        try:
            effect = run_handler(handler, lease)
            if effect is not None and not callable(effect):
                raise TypeError(
                    f"the handler returned {type(effect).__name__}; return None or an "
                    "effect f(conn) to commit with the completion"
                )
        except Exception as exc:
            self._fail(lease, exc, started)
            return
        self._complete(lease, effect, started)

    def _complete(self, lease: Lease, effect: Effect | None, started: float) -> None:
        """Every completion goes through here (one place to batch them later)."""
        lease.reporting = True
        try:
            done = self._until_reachable(lambda: self.queue.complete(lease.job, effect=effect))
        except Exception as exc:  # the effect raised (rolled back), or the database did
            if connection_lost(exc):  # given up on a second stop signal
                log.warning(
                    "%s finished, but the database is out of reach: its lease will hand it on",
                    label(lease),
                )
                return
            self._fail(lease, exc, started)
            return
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
        with self._lock:
            del self._leases[lease.job.id]

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
                if not held and not lease.reporting:
                    lease.lost.set()
                    log.warning(
                        "%s lost its lease (it ran out and another claim took the job)",
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
