"""The worker (W1 to W7): claims jobs, runs their handlers on N slots, reports each
outcome, keeps leases alive while handlers run, and stops without losing or burning a job.

Each role has a module of its own, so another kind of worker can share the policies:
- `queuecore.worker.claimer`: asks for as many jobs as there are free slots (plus a prefetch),
  of the kinds it has handlers for, and waits cheaply when there are none;
- `queuecore.worker.slots`, `queuecore.worker.processes.handler_slot` and
  `queuecore.worker.processes.handler_processes`: N slots each run one
  handler at a time, on the worker's threads, or each in a handler process of its own (W7);
- `queuecore.worker.reporter` (with `queuecore.worker.acks`, the ack window): tells the queue what
  became of each job;
- `queuecore.worker.leases`: one thread extends every held lease about every lease/3 (W3),
  and tells running handlers of a cancel within a second (W9);
- `queuecore.worker.listener`: on PostgreSQL, NOTIFYs of new jobs wake the claimer (W6);
- `queuecore.worker.holdings`: the jobs held, which all of them share.
- `queuecore.worker.signals`: SIGTERM and SIGINT stop it gracefully (W4).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable, Mapping
from types import FrameType

from queuecore.handling import Handler
from queuecore.observe.observer import NO_OBSERVER, WorkerObserver
from queuecore.observe.worklog import log
from queuecore.protocol import Queue
from queuecore.worker import presence
from queuecore.worker.async_handling import runs_on_event_loop
from queuecore.worker.claimer import Claimer
from queuecore.worker.holdings import Holdings
from queuecore.worker.leases import LeaseKeeper, hear_cancels
from queuecore.worker.listener import Wakeups
from queuecore.worker.processes.handler_processes import ForkServer, HandlerProcesses
from queuecore.worker.processes.handler_slot import HandlerProcess
from queuecore.worker.processes.loop_slot import LoopProcess
from queuecore.worker.reporter import Reporter
from queuecore.worker.scheduler import scheduler_threads
from queuecore.worker.settings import DEFAULT_CANCEL_GRACE, worker_settings
from queuecore.worker.signals import serve_until_signalled
from queuecore.worker.slots import InThread, Runner


class Worker:
    """Runs handlers for the jobs of `queue` until stopped.

    `handlers` maps kind → `fn(job)` (a dict or a `queuecore.Registry`); only jobs of
    those kinds are claimed (W2). The handler may return a result (a JSON value), an
    effect `f(conn)` committed with the completion, or both as `Done(result, effect)`;
    it may raise `Permanent` or `Retry(seconds)`; any other
    exception fails the job with its backoff. Inside a handler,
    `queuecore.current_lease().lost` is set once the job was lost (W3).

    Handlers run on the worker's threads, unless `handler_processes` says how to start
    a process per slot for them (W7: a handler that kills its process then takes only
    its own job with it; `queuecore worker` always does).

    Completions wait in an ack window until `ack_batch` of them, or the oldest has waited
    `ack_seconds`, then commit together (one transaction instead of one per job); a job
    in the window keeps its lease, so a crash only makes it run again. `ack_batch=1` or
    `ack_seconds=0` completes each job at once. Held leases never exceed
    `concurrency + prefetch + ack_batch`.

    `prefetch` jobs are claimed ahead of the slots, so that a slot never waits for a
    claim between two jobs and claims take several jobs at once. By default (None) it
    follows the handlers' mean run time: about 50 ms of work per slot, at most 128 jobs
    (see `queuecore.worker.claimer`); jobs claimed ahead and not started are released at a
    stop, uncharged (W4).

    `timeout` (seconds) is the time limit of the handlers whose kind has none of its own
    (`@REGISTRY.handler(kind, timeout=S)`), W8: a handler process past it is killed and
    its job failed with "timed out after S s"; a handler on the worker's threads cannot be
    killed: its lease is marked lost, its job failed, and its slot stops waiting for it.
    `cancel_grace` (W9): a handler process still running that long after its lease was
    lost (a cancel, or a lease that ran out) is killed and its slot freed; None never.

    The worker keeps a record of itself in the database (R33, `workers()`), written at its
    start and every heartbeat interval, and removed when it stops.

    With handlers on the worker's own threads, the queue's connection pool must allow
    `concurrency + 4` connections at once (slots, claimer, heartbeat, ack window, the
    worker's record). With `handler_processes` the slots use none of the worker's, and a
    pool of one serves (the command line's): each handler process connects on its own.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: Mapping[str, Handler],
        *,
        concurrency: int = 1,
        queues: Iterable[str] | None = None,
        name: str | None = None,
        prefetch: int | None = None,
        poll_interval: float = 1.0,
        heartbeat_seconds: float | None = None,
        grace_seconds: float = 30.0,
        exit_when_idle: float | None = None,
        ack_batch: int = 100,
        ack_seconds: float = 0.05,
        handler_processes: HandlerProcesses | None = None,
        observer: WorkerObserver = NO_OBSERVER,
        timeout: float | None = None,
        cancel_grace: float | None = DEFAULT_CANCEL_GRACE,
    ) -> None:
        settings = worker_settings(
            queue,
            handlers,
            concurrency=concurrency,
            queues=queues,
            name=name,
            prefetch=prefetch,
            poll_interval=poll_interval,
            heartbeat_seconds=heartbeat_seconds,
            grace_seconds=grace_seconds,
            exit_when_idle=exit_when_idle,
            ack_batch=ack_batch,
            ack_seconds=ack_seconds,
            timeout=timeout,
            cancel_grace=cancel_grace,
        )
        self.queue = queue
        self.handlers = handlers
        self.concurrency = settings.concurrency
        self.queues = settings.queues
        self.name = settings.name
        self.poll_interval = settings.poll_interval
        self.heartbeat_seconds = settings.heartbeat_seconds
        self.grace_seconds = settings.grace_seconds
        self.handler_processes = handler_processes
        self.observer = observer  # told what the worker does, e.g. for metrics
        self.max_result_bytes = settings.max_result_bytes
        self.limits = settings.limits
        self._fork_server = (
            None
            if handler_processes is None
            else ForkServer(handler_processes, max_result_bytes=self.max_result_bytes)
        )
        # `async def` handlers run on the event loop of one handler process (ADR 0011).
        self._loop_process: LoopProcess | None = None
        if runs_on_event_loop(handlers):
            if self._fork_server is None:
                raise TypeError(
                    "this registry has async def handlers: run it with queuecore.AsyncWorker, "
                    "or give handler_processes= (as `queuecore worker` does)"
                )
            self._loop_process = LoopProcess(
                self._fork_server, slots=self.concurrency, limits=self.limits
            )
        self._holdings = Holdings(checked=True)
        self._hurry = threading.Event()  # a second stop: do not wait for running handlers
        self._finished = threading.Event()  # heartbeat and listener threads end
        self._crash: BaseException | None = None
        self._reporter = Reporter(
            queue,
            self._holdings,
            ack_batch=settings.ack_batch,
            ack_seconds=settings.ack_seconds,
            longest_pause=self.poll_interval,
            hurry=self._hurry,
            observer=observer,
        )
        listen = getattr(queue, "listen", None)
        self._wakeups = None
        if listen is not None:
            self._wakeups = Wakeups(
                listen,
                queues=self.queues,
                wake=self._holdings.wake,
                finished=self._finished,
                poll_interval=self.poll_interval,
                cancelled=self._cancelled,
            )
        self._claimer = Claimer(
            queue,
            self._holdings,
            settings,
            self._reporter.release,
            kinds=sorted(handlers),
            listening=lambda: self.listening,
            observer=observer,
        )

    @property
    def listening(self) -> bool:
        """True while PostgreSQL notifications wake this worker; polling is then a fallback."""
        return self._wakeups is not None and self._wakeups.listening

    # --- running and stopping -------------------------------------------------------

    def run(self) -> None:
        """Work until `stop()`, SIGTERM/SIGINT (on the main thread) or `exit_when_idle`."""
        if threading.current_thread() is threading.main_thread():
            serve_until_signalled(self._serve_reporting, self._on_signal)
        else:
            self._serve()
        if self._crash is not None:
            raise self._crash

    def stop(self) -> None:
        """Stop claiming, let running handlers finish within the grace period, release the
        jobs not started (W4). A second call stops waiting for running handlers."""
        if self._holdings.stopping.is_set():
            self._hurry.set()
            return
        self._holdings.stopping.set()
        self._holdings.wake.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._holdings.stopping.is_set():
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
        self._reporter.start()
        runners = self._runners()
        self._holdings.starting(sum(runner.slots for runner in runners if not runner.started))
        slots = [
            threading.Thread(target=self._slot, args=(runner,), name=f"queuecore-slot-{i}")
            for i, runner in enumerate(runners)
        ]
        keeper = LeaseKeeper(
            self.queue,
            self._holdings,
            self.heartbeat_seconds,
            self._finished,
            self.observer,
        )
        helpers = [threading.Thread(target=keeper.run, name="queuecore-heartbeat")]
        mine = presence.record(
            self.queues, sorted(self.handlers), self.concurrency, self.heartbeat_seconds
        )
        helpers.append(
            threading.Thread(
                target=presence.keep_record,
                args=(self.queue, self.name, mine, self._running, self._finished),
                name="queuecore-presence",
            )
        )
        helpers += scheduler_threads(self.queue, self.handlers, self._holdings.stopping)
        if self._wakeups is not None:
            helpers.append(threading.Thread(target=self._wakeups.run, name="queuecore-listener"))
        for thread in slots + helpers:
            thread.daemon = True
            thread.start()
        log.info(
            "worker %s started: %d slot(s)%s, queues %s, kinds %s, heartbeat every %.1fs, %s",
            self.name,
            self.concurrency,
            self._where_handlers_run(),
            ",".join(self.queues) if self.queues else "(all)",
            ",".join(self._claimer.kinds),
            self.heartbeat_seconds,
            self._reporter.describe(),
        )
        try:
            self._claimer.run()
        finally:
            self._shut_down(slots, runners)
            self._finished.set()
            for thread in helpers:
                thread.join(timeout=2)
            log.info("worker %s stopped", self.name)

    def _cancelled(self, ids: list[int]) -> None:
        """PostgreSQL told of cancelled jobs: the handlers running them hear it (W9)."""
        hear_cancels(self._holdings, ids, self.observer)

    def _running(self) -> int:
        return len(self._holdings.leases())

    def _shut_down(self, slots: list[threading.Thread], runners: list[Runner]) -> None:
        for lease in self._holdings.stop():
            self._reporter.release(lease)
        deadline = time.monotonic() + self.grace_seconds
        while any(t.is_alive() for t in slots) and not self._hurry.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._hurry.wait(min(left, 0.05))
        if any(t.is_alive() for t in slots):
            for runner in runners:  # past the grace: their handlers stop with the worker
                runner.abandon()
        for lease in self._holdings.left_over():
            self._reporter.release(lease)
        self._reporter.close()  # the finished jobs' completions commit before the exit
        if self._fork_server is not None:
            self._fork_server.close()
        abandoned = len(self._holdings.leases())
        if abandoned:
            log.warning(
                "%d job(s) still running at exit%s; their leases will run out and hand them on",
                abandoned,
                ", their handlers stopped" if self._fork_server is not None else "",
            )

    # --- running jobs -------------------------------------------------------------------

    def _where_handlers_run(self) -> str:
        if self._loop_process is not None:
            return " as tasks of one handler process's event loop"
        return " in handler processes" if self.handler_processes else ""

    def _runners(self) -> list[Runner]:
        """One per slot, but one for them all when the handlers run on an event loop."""
        if self._loop_process is not None:
            return [self._loop_process]
        if self._fork_server is None:
            return [
                InThread(self.handlers, self.max_result_bytes, self.limits)
                for _ in range(self.concurrency)
            ]
        return [HandlerProcess(self._fork_server, self.limits) for _ in range(self.concurrency)]

    def _slot(self, runner: Runner) -> None:
        """A slot whose runner failed (a handler process that cannot start) stops the
        worker, which then exits with that error."""
        try:
            runner.serve(self._holdings, self._reporter, self.observer)
        except Exception as exc:
            log.error("a worker slot failed (%s): stopping the worker", exc)
            self._crash = self._crash or exc
            self._holdings.stopping.set()
            self._holdings.wake.set()
