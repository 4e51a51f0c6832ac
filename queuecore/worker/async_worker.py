"""The async worker: `async def` handlers run concurrently as tasks of one event loop,
under the sync worker's rules W1 to W7 (W7 in-process: see `AsyncWorker`).

Its roles are tasks of the loop it runs on: the claimer and the lease keeper (each
beside its sync twin, in `queuecore.worker.claimer` and `queuecore.worker.leases`, over
the jobs it holds, `queuecore.worker.holdings`), on PostgreSQL the LISTEN that wakes the claimer
(`queuecore.worker.listener`), `concurrency` handler tasks, and the reporter with its ack
window (`queuecore.worker.reporter`); a registry's periodic schedules run on a thread of
their own (`queuecore.worker.scheduler`), enqueueing through the loop. It talks to the database
only through the public `AsyncQueue` API, so it runs on whatever `connect_async` gives.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from queuecore.handling import Handler, Raised, Returned
from queuecore.job import EnqueueResult
from queuecore.observe.observer import NO_OBSERVER, WorkerObserver
from queuecore.observe.worklog import log
from queuecore.worker import presence
from queuecore.worker.async_handling import AsyncLease, async_outcome_of
from queuecore.worker.claimer import AsyncClaimer
from queuecore.worker.holdings import AsyncHoldings
from queuecore.worker.leases import keep_leases
from queuecore.worker.listener import AsyncWakeups
from queuecore.worker.reporter import AsyncReporter
from queuecore.worker.scheduler import scheduler_threads
from queuecore.worker.settings import DEFAULT_CANCEL_GRACE, worker_settings
from queuecore.worker.signals import SIGNALS
from queuecore.worker.time_limits import timed_out

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

T = TypeVar("T")


class AsyncWorker:
    """Runs handlers for the jobs of an `AsyncQueue` until stopped: `await worker.run()`.

    `handlers` maps kind → handler, as for `queuecore.Worker` (only those kinds are
    claimed, W2); a handler may be `async def fn(job)`, run as a task of this loop, or a
    plain `fn(job)`, run on a pool of `concurrency` threads so it cannot block the loop.
    `concurrency` is how many jobs run at once, of both sorts together; `prefetch` how
    many it claims ahead of them (by default about 50 ms of work, as for a `Worker`:
    short handlers' jobs by the dozen, none ahead of handlers that take seconds).
    Handlers return and raise what a sync worker's do (a result, an effect, `Done`,
    `Permanent`, `Retry`); inside one, `queuecore.current_lease().lost_async` is an `asyncio.Event`
    set when a heartbeat finds the job lost (W3), together with `.lost`.

    Every handler runs in this process: one that kills it (`os._exit`, a segfault)
    takes every running job with it, and they wait for their leases (W5). `queuecore
    worker` isolates them in a handler process instead (ADR 0011).

    `timeout` (seconds) is the time limit of the handlers whose kind has none of its own
    (W8): past it, the lease is marked lost, an `async def` handler's task is cancelled,
    the job failed with "timed out after S s", and the slot takes its next job without
    waiting for the handler to end (a sync handler's thread cannot be stopped: it runs on,
    its outcome discarded). `cancel_grace` is a handler process's (`queuecore worker`):
    in this process a handler whose lease was lost must see `lost` itself.

    `run()` handles SIGTERM and SIGINT when called on the main thread (W4); an
    application whose server owns those calls `stop()` itself, on the loop's thread (a
    second call stops waiting for running handlers).
    """

    def __init__(
        self,
        queue: AsyncQueue,
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
        observer: WorkerObserver = NO_OBSERVER,
        timeout: float | None = None,
        cancel_grace: float | None = DEFAULT_CANCEL_GRACE,
    ) -> None:
        self.settings = worker_settings(
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
        self.observer = observer
        self._holdings: AsyncHoldings | None = None  # made on the loop, by run()
        self._hurry: asyncio.Event | None = None
        self._wakeups: AsyncWakeups | None = None  # made on the loop, by run(), if it can LISTEN
        self._crash: BaseException | None = None  # a task's bug: run() raises it
        self._abandoned: set[asyncio.Future[Returned | Raised]] = set()  # past their limit

    @property
    def listening(self) -> bool:
        """True while PostgreSQL notifications wake this worker; polling is then a fallback."""
        return self._wakeups is not None and self._wakeups.listening

    # --- running and stopping ---------------------------------------------------------

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until `stop()`, SIGTERM/SIGINT or `exit_when_idle`. Signals are handled
        only on the main thread, and not with `handle_signals=False`: an application
        that runs the worker beside its own server (whose signals they are) stops it."""
        loop = asyncio.get_running_loop()
        self._holdings, self._hurry = AsyncHoldings(), asyncio.Event()
        on_main = threading.current_thread() is threading.main_thread()
        ours = handle_signals and on_main
        previous = {sig: signal.getsignal(sig) for sig in SIGNALS} if ours else {}
        for sig in previous:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self._serve()
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)
        if self._crash is not None:
            raise self._crash

    def stop(self) -> None:
        """Stop claiming, let running handlers finish within the grace period, release the
        jobs not started (W4). A second call stops waiting for running handlers."""
        if self._holdings is None or self._hurry is None:
            raise RuntimeError("the worker is not running")
        if self._holdings.stopping.is_set():
            self._hurry.set()
            return
        self._holdings.stopping.set()
        self._holdings.wake.set()

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._holdings is not None and self._holdings.stopping.is_set():
            log.warning("%s again: not waiting for running handlers any longer", name)
        else:
            log.info(
                "%s: finishing running jobs (grace %.0fs), then exiting",
                name,
                self.settings.grace_seconds,
            )
        self.stop()

    async def _serve(self) -> None:
        assert self._holdings is not None and self._hurry is not None
        holdings = self._holdings
        reporter = AsyncReporter(
            self.queue,
            holdings,
            ack_batch=self.settings.ack_batch,
            ack_seconds=self.settings.ack_seconds,
            longest_pause=self.settings.poll_interval,
            hurry=self._hurry,
            observer=self.observer,
        )
        finished = asyncio.Event()  # the lease keeper and the LISTEN end
        listen = getattr(self.queue, "listen", None)  # an AsyncQueue of another make may not
        if listen is not None:
            self._wakeups = AsyncWakeups(
                listen,
                queues=self.settings.queues,
                wake=holdings.wake,
                finished=finished,
                poll_interval=self.settings.poll_interval,
            )
        claimer = AsyncClaimer(
            self.queue,
            holdings,
            self.settings,
            kinds=sorted(self.handlers),
            listening=lambda: self.listening,
            observer=self.observer,
        )
        pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="queuecore-handler")
        reporter.start()
        tasks = [
            asyncio.create_task(self._slot(pool, reporter), name=f"queuecore-task-{i}")
            for i in range(self.settings.concurrency)
        ]
        for task in tasks:
            task.add_done_callback(self._task_ended)
        heartbeats = asyncio.create_task(
            keep_leases(
                self.queue, holdings, self.settings.heartbeat_seconds, finished, self.observer
            )
        )
        settings = self.settings
        mine = presence.record(
            settings.queues, sorted(self.handlers), settings.concurrency, settings.heartbeat_seconds
        )
        record = asyncio.create_task(
            presence.keep_record_async(
                self.queue, settings.name, mine, lambda: len(holdings.leases), finished
            )
        )
        wakeups = asyncio.create_task(self._wakeups.run()) if self._wakeups else None
        stop_schedules = threading.Event()
        schedules = scheduler_threads(
            ThroughLoop(self.queue, asyncio.get_running_loop()), self.handlers, stop_schedules
        )
        for thread in schedules:
            thread.daemon = True
            thread.start()
        log.info(
            "worker %s started: %d task(s) on an event loop, queues %s, kinds %s, "
            "heartbeat every %.1fs, %s",
            self.settings.name,
            self.settings.concurrency,
            ",".join(self.settings.queues) if self.settings.queues else "(all)",
            ",".join(claimer.kinds),
            self.settings.heartbeat_seconds,
            reporter.describe(),
        )
        try:
            await claimer.run()
        finally:
            stop_schedules.set()
            await self._shut_down(tasks, reporter)
            finished.set()
            await heartbeats
            await record
            if wakeups is not None:
                await wakeups
            for thread in schedules:
                await asyncio.to_thread(thread.join, 2)
            pool.shutdown(wait=False)
            log.info("worker %s stopped", self.settings.name)

    async def _shut_down(self, tasks: list[asyncio.Task[None]], reporter: AsyncReporter) -> None:
        assert self._holdings is not None and self._hurry is not None
        for lease in await self._holdings.stop():
            await reporter.release(lease)
        hurry = asyncio.create_task(self._hurry.wait())
        everyone = asyncio.create_task(asyncio.wait(tasks))
        await asyncio.wait(
            [everyone, hurry],
            timeout=self.settings.grace_seconds,
            return_when=asyncio.FIRST_COMPLETED,
        )
        running = [task for task in tasks if not task.done()]
        if running:
            log.warning(
                "%d job(s) still running at exit; their leases will hand them on", len(running)
            )
        for task in [*running, everyone, hurry]:
            task.cancel()
        await asyncio.gather(*running, everyone, hurry, return_exceptions=True)
        await reporter.close()  # the finished jobs' completions commit before the exit

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A task that failed (a bug: handlers' exceptions are outcomes) stops the
        worker, which then raises it, as a failed slot stops a `Worker`."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("a worker task failed (%r): stopping the worker", task.exception())
        self._crash = self._crash or task.exception()
        assert self._holdings is not None
        self._holdings.stopping.set()
        self._holdings.wake.set()

    async def _slot(self, pool: ThreadPoolExecutor, reporter: AsyncReporter) -> None:
        """One of `concurrency` tasks: a job at a time, until stopping."""
        assert self._holdings is not None
        while True:
            lease = await self._holdings.next_waiting(self.queue)
            if lease is None:
                return
            started = time.monotonic()
            lease.began = True
            self.observer.handler_started(lease.job)
            limit = self.settings.limits.of(lease.job.kind)
            try:
                running = async_outcome_of(
                    self.handlers, lease, pool, max_result_bytes=self.settings.max_result_bytes
                )
                if limit is None:
                    outcome = await running
                else:
                    outcome = await self._within(limit, lease, running)
            except BaseException:  # cancelled: a stop gave up waiting, its lease hands it on
                self._holdings.let_go(lease)
                raise
            finally:
                seconds = time.monotonic() - started
                self.observer.handler_ended(lease.job, seconds)
                self._holdings.ran(seconds)
            await reporter.report(lease, outcome, started)

    async def _within(
        self, limit: float, lease: AsyncLease, running: Coroutine[Any, Any, Returned | Raised]
    ) -> Returned | Raised:
        """The handler's outcome, or, at its time limit (W8), a failure: its lease marked
        lost and its task cancelled, not waited for (a task that ignores the cancel, or a
        sync handler's thread, runs on; its outcome is discarded)."""
        task = asyncio.ensure_future(running)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit)
        except BaseException:  # the slot itself was cancelled (a stop): so is the handler
            task.cancel()
            raise
        if done:
            return task.result()
        lease.mark_lost()
        task.cancel()
        self._abandoned.add(task)  # held until it ends: the loop keeps weak references
        task.add_done_callback(self._abandoned.discard)
        return Raised(
            f"{timed_out(limit)} (its task was cancelled and is no longer waited for; "
            "a sync handler's thread runs on)"
        )


class ThroughLoop:
    """The sync face that periodic schedules need (`now`, `enqueue`), from their thread
    through the worker's loop and its `AsyncQueue`."""

    def __init__(self, queue: AsyncQueue, loop: asyncio.AbstractEventLoop) -> None:
        self.queue = queue
        self.loop = loop

    def now(self) -> float:
        return self._call(self.queue.now())

    def enqueue(self, kind: str, payload: Mapping[str, Any], **options: Any) -> EnqueueResult:
        return self._call(self.queue.enqueue(kind, payload, **options))

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()
