"""The contract every backend satisfies. Code that uses a queue should type against this.

`Queue` holds everything a queue object offers its users, so that code typed against it
never needs a backend's class: the operations of docs/contract.md, the settings a
worker reads back (`lease_seconds`, `max_attempts`), the engine an effect or a report
runs on, and the context manager. `tests/test_protocol.py` checks both ways: that
mypy accepts every backend as a `Queue`, and that no public method of a backend is
missing from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from sqlalchemy import Connection, Engine

from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo

if TYPE_CHECKING:  # the asyncio extension needs greenlet: the async extra only
    from sqlalchemy.ext.asyncio import AsyncConnection

Effect = Callable[[Connection], object]
"""A database effect: called with the completing transaction's connection (R10)."""

AsyncEffect = Callable[["AsyncConnection"], Awaitable[object]]
"""An effect of the async queue, awaited with the completing transaction's connection."""


@runtime_checkable
class Queue(Protocol):
    """A job queue on one database, as `queuecore.connect(dsn)` opens it.

    Your application enqueues jobs and reads them back (`enqueue`, `enqueue_many`,
    `get`, `wait`, `cancel`, `list_jobs`, `stats`); workers claim and report on them
    (`claim`, `heartbeat`, `complete`, `fail`, `release`); operators mend the queue
    (`dead_jobs`, `requeue_dead`, `purge`). Every method is safe to call from several
    threads and processes at once. Use it as a context manager, or call `close()`.
    """

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the queue runs on: R03's transactions and readers of the
        table (the dashboard, `copy`) use it."""
        ...

    @property
    def lease_seconds(self) -> float:
        """How long a claim holds a job (R06), and a heartbeat extends it (R13)."""
        ...

    @property
    def max_attempts(self) -> int:
        """The attempts a job gets when its enqueue names none (R01)."""
        ...

    def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        queue: str = "default",
        delay: float = 0,
        run_at: datetime | float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        conn: Connection | None = None,
    ) -> EnqueueResult:
        """Add one job, and return its id.

        The job waits in `queue` until a worker with a handler for `kind` claims it:
        at once, or after `delay` seconds, or at `run_at`. Lower `priority` runs first.

        Args:
            kind: which handler runs it (the registry's key).
            payload: the handler's input, a JSON object (a dict of JSON values).
            queue: the queue it waits in; workers may serve some queues only.
            delay: seconds from now before it may run (not with `run_at`).
            run_at: when it may run, a datetime or epoch seconds (not with `delay`).
            priority: lower runs first among ready jobs; ties run oldest first.
            max_attempts: runs before it is dead (default: the queue's `max_attempts`).
            dedupe_key: enqueue this work at most once: while a job with this key is in
                the table, enqueueing it again writes nothing and returns that job's id
                with `created=False`.
            conn: your own open transaction's connection: the job is written in it, and
                exists only if you commit (on SQLite, see `queuecore.sqlite_engine`).

        Returns:
            The job's id, and whether it was created (False for a known `dedupe_key`).

        Raises:
            TypeError: the payload is not a JSON object.
            ValueError: bad input (an empty kind, a negative delay, `max_attempts < 1`,
                a name too long); nothing is written.
            queuecore.DedupeConflict: the `dedupe_key` belongs to a job of another kind
                or payload.
            queuecore.QueuecoreError: the database failed (unreachable, full, ...).

        Rules: R01, R02, R03, R22, R27.
        """
        ...

    def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: Connection | None = None,
    ) -> list[int]:
        """Add many jobs of one kind in one transaction, and return their ids in order.

        Much faster than one `enqueue` per job: one round trip per batch. The jobs are
        ready at once; there is no delay or dedupe key per job.

        Args:
            kind: which handler runs them.
            payloads: one JSON object per job.
            queue: the queue they wait in.
            priority: lower runs first.
            max_attempts: runs before a job is dead (default: the queue's).
            conn: your own open transaction's connection, as for `enqueue`.

        Returns:
            The new jobs' ids, in the order of `payloads`.

        Raises:
            TypeError: a payload is not a JSON object (nothing is written).
            ValueError: bad input; nothing is written.
            queuecore.QueuecoreError: the database failed.
        """
        ...

    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]:
        """Take up to `limit` ready jobs for `worker` to run, under a lease.

        Workers call this for you; call it yourself only to write your own worker loop.
        A claimed job is yours until `lease_seconds` pass: `heartbeat` extends the lease,
        and `complete`, `fail` or `release` reports on it. A job whose lease runs out is
        handed to the next claim, which counts another attempt.

        Args:
            worker: the claiming worker's name, stored on the job.
            limit: the most jobs to take.
            queues: take only from these queues (default: every queue).
            kinds: take only jobs of these kinds (default: every kind).

        Returns:
            The claimed jobs, by priority then age; [] when none is ready.

        Raises:
            ValueError: bad input (`limit < 1`, an empty name).
            queuecore.QueuecoreError: the database failed.

        Rules: R04-R07, R23.
        """
        ...

    def complete(self, job: Job, *, effect: Effect | None = None, result: Any = None) -> bool:
        """Mark a claimed job done, storing `result` and running `effect` with it.

        Args:
            job: the job as `claim` returned it (its lease token is checked).
            effect: `f(conn)`, run in the transaction that marks the job done: your own
                writes commit together with the completion, or not at all.
            result: any JSON value, stored as the job's result (`get(id).result`).

        Returns:
            True; False when this claim no longer holds the job (its lease ran out and
            another worker took it, or it was cancelled): nothing was written and the
            effect did not run.

        Raises:
            Exception: whatever `effect` raises (the job stays as it was).
            ValueError: `result` is not JSON or too large.
            queuecore.QueuecoreError: the database failed.

        Rules: R09, R10, R24.
        """
        ...

    def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions:
        """`complete` for many claimed jobs, in one transaction where it can.

        Args:
            jobs: the claimed jobs.
            effects: one effect (or None) per job, as `complete` takes.
            results: one result (or None) per job.

        Returns:
            One bool per job, in order (True: completed); a job whose effect raised is
            False and its error is in the answer's `errors`, by job id.

        Raises:
            ValueError: `effects` or `results` do not match `jobs` in length.
            queuecore.QueuecoreError: the database failed.
        """
        ...

    def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None:
        """Report that a claimed job's attempt failed.

        With attempts left the job is queued again after a backoff (random, up to
        `backoff_base * 2 ** (attempt - 1)` seconds, at most `backoff_cap`); without,
        it is dead and waits for `requeue_dead`.

        Args:
            job: the job as `claim` returned it.
            error: what went wrong (a traceback is fine; long text is cut).
            retry_in: retry after this many seconds instead of the backoff.
            permanent: dead at once, whatever attempts are left.

        Returns:
            "queued" or "dead", what became of it; None when this claim no longer holds
            the job (nothing was written).

        Raises:
            ValueError: bad input (a negative `retry_in`).
            queuecore.QueuecoreError: the database failed.

        Rules: R11, R12, R32.
        """
        ...

    def heartbeat(self, job: Job) -> bool:
        """Extend a claimed job's lease by `lease_seconds` from now.

        Workers do this for you while a handler runs.

        Args:
            job: the job as `claim` returned it.

        Returns:
            True; False when this claim no longer holds the job (stop working on it).

        Raises:
            queuecore.QueuecoreError: the database failed.

        Rule: R13.
        """
        ...

    def release(self, job: Job) -> bool:
        """Hand a claimed job back unrun: queued and ready now, the attempt not counted.

        Workers do this for the jobs they claimed ahead and could not start before
        shutting down.

        Args:
            job: the job as `claim` returned it.

        Returns:
            True; False when this claim no longer holds the job.

        Raises:
            queuecore.QueuecoreError: the database failed.

        Rule: R14.
        """
        ...

    def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]:
        """Give dead jobs a new set of attempts: queued, ready now, attempts back to 0.

        Args:
            ids: the dead jobs to requeue (default: every dead job).

        Returns:
            The ids requeued; an id that is not dead (or unknown) is left alone and missing.

        Raises:
            TypeError: `ids` is not an iterable of ids.
            queuecore.QueuecoreError: the database failed.

        Rule: R15.
        """
        ...

    def stats(self, queue: str | None = None) -> Mapping[str, Any]:
        """Count the jobs, per queue and in total, and the live ones per kind.

        Args:
            queue: one queue's counts only (default: every queue, with totals).

        Returns:
            A mapping with `queued`, `running`, `ready_now` (could be claimed this
            instant), `oldest_ready_age_s`, `dead` and `cancelled`; for the whole queue
            also `queues` (the same per queue) and `kinds` (live jobs per kind).

        Raises:
            queuecore.QueuecoreError: the database failed.

        Rule: R16.
        """
        ...

    def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int:
        """Delete finished jobs that finished more than `older_than` seconds ago.

        Never a queued or running job; done ones only unless `states` says more. Runs in
        short transactions of `batch` rows, so it can run beside workers.

        Args:
            older_than: age in seconds since the job finished.
            states: which finished states to delete: "done", "dead", "cancelled".
            batch: rows deleted per transaction.

        Returns:
            How many jobs were deleted.

        Raises:
            ValueError: an unknown or unfinished state, a negative age.
            queuecore.QueuecoreError: the database failed.

        Rule: R17.
        """
        ...

    def get(self, job_id: int) -> JobSnapshot | None:
        """Read one job: its state, attempts, errors, result, payload and times.

        What a status endpoint needs (`queuecore show ID` prints the same).

        Args:
            job_id: the id `enqueue` returned.

        Returns:
            A snapshot of the job, or None when there is no such job (or it was purged).

        Raises:
            ValueError: `job_id` is not an integer.
            queuecore.QueuecoreError: the database failed.

        Rules: R18, R24, R32.
        """
        ...

    def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        """The dead jobs (out of attempts, or failed permanently), newest first, with their
        last error: `queue` limits them to one queue, `limit` to that many (R08)."""
        ...

    def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        """Jobs in id order after `after_id`, at most `limit`; `state`, `kind` and
        `queue` each filter by one value or a list (None: all) (R31)."""
        ...

    def held(self, jobs: Sequence[Job]) -> list[bool]:
        """For workers: per job, whether its claim still holds it (its fence would pass).
        A read that writes nothing, so that a cancelled job claimed ahead never starts
        (W9)."""
        ...

    def mark_started(self, jobs: Sequence[Job]) -> int:
        """For workers: these jobs' handlers have started (W9), so their snapshots'
        `started_at` tells them from jobs held ahead of a slot. Only jobs still held
        under the given claims are marked, once each; returns how many were."""
        ...

    def cancel(self, job_id: int) -> bool:
        """Cancel a queued or running job: it becomes cancelled and never runs (again); a
        running handler hears of it within about a second (W9). Returns True, or False when the
        job had finished already or does not exist (R25)."""
        ...

    def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """Wait until the job is done, dead or cancelled, at most `timeout` seconds, and
        return its snapshot then (or as it is when the time is up); None for an unknown
        id (R26)."""
        ...

    def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        """`record` holds `host`, `pid`, `queues`, `kinds`,
        `concurrency`, `heartbeat_seconds` and `running`; written at the worker's start and
        on each heartbeat (one statement when its record is there) (R33)."""
        ...

    def forget_worker(self, name: str) -> None:
        """Remove a worker's record, as a worker stopping cleanly does (R33)."""
        ...

    def workers(self) -> list[WorkerInfo]:
        """The workers seen in the last hour, by name; `gone` when not seen for
        three heartbeats (R33)."""
        ...

    def now(self) -> float:
        """The queue's clock in epoch seconds (R20), for code that must agree with it."""
        ...

    def listen(self) -> Listener | None:
        """A connection that hears of new jobs, for idle workers (W6); None: poll."""
        ...

    def close(self) -> None:
        """Close the queue: dispose of the engine it made (an engine you gave it is left
        open for you). `with queuecore.connect(...) as queue:` closes it at the end."""
        ...

    def __enter__(self) -> Queue: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class AsyncQueue(Protocol):
    """`Queue` for asyncio code (`queuecore.connect_async`): every operation a coroutine
    with the same arguments, answers and errors; `conn=` takes an `AsyncConnection`, and
    an effect may be `async def f(conn: AsyncConnection)` or a plain `def f(conn:
    Connection)` (run through `AsyncConnection.run_sync`, in the same transaction)."""

    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        queue: str = "default",
        delay: float = 0,
        run_at: datetime | float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        conn: AsyncConnection | None = None,
    ) -> EnqueueResult:
        """Add one job: `Queue.enqueue`, awaited.

        The same arguments, answer and errors.
        `conn` is an `AsyncConnection`."""
        ...

    async def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> list[int]:
        """Add many jobs of one kind: `Queue.enqueue_many`, awaited.

        The same arguments, answer and errors.
        `conn` is an `AsyncConnection`."""
        ...

    async def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]:
        """Take ready jobs under a lease: `Queue.claim`, awaited.

        The same arguments, answer and errors."""
        ...

    async def complete(
        self, job: Job, *, effect: AsyncEffect | Effect | None = None, result: Any = None
    ) -> bool:
        """Mark a claimed job done: `Queue.complete`, awaited.

        The same arguments, answer and errors."""
        ...

    async def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[AsyncEffect | Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions:
        """Mark claimed jobs done: `Queue.complete_many`, awaited.

        The same arguments, answer and errors."""
        ...

    async def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None:
        """Report a failed attempt: `Queue.fail`, awaited.

        The same arguments, answer and errors."""
        ...

    async def heartbeat(self, job: Job) -> bool:
        """Extend a claimed job's lease: `Queue.heartbeat`, awaited.

        The same arguments, answer and errors."""
        ...

    async def release(self, job: Job) -> bool:
        """Hand a claimed job back unrun: `Queue.release`, awaited.

        The same arguments, answer and errors."""
        ...

    async def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]:
        """Give dead jobs new attempts: `Queue.requeue_dead`, awaited.

        The same arguments, answer and errors."""
        ...

    async def stats(self, queue: str | None = None) -> Mapping[str, Any]:
        """Count the jobs: `Queue.stats`, awaited.

        The same arguments, answer and errors."""
        ...

    async def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int:
        """Delete old finished jobs: `Queue.purge`, awaited.

        The same arguments, answer and errors."""
        ...

    async def get(self, job_id: int) -> JobSnapshot | None:
        """Read one job: `Queue.get`, awaited.

        The same arguments, answer and errors."""
        ...

    async def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        """The dead jobs (out of attempts, or failed permanently), newest first, with their
        last error: `queue` limits them to one queue, `limit` to that many (R08)."""
        ...

    async def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        """Jobs in id order after `after_id`, at most `limit`; `state`, `kind` and
        `queue` each filter by one value or a list (None: all) (R31)."""
        ...

    async def held(self, jobs: Sequence[Job]) -> list[bool]:
        """For workers: per job, whether its claim still holds it (its fence would pass).
        A read that writes nothing, so that a cancelled job claimed ahead never starts
        (W9)."""
        ...

    async def mark_started(self, jobs: Sequence[Job]) -> int:
        """For workers: these jobs' handlers have started (W9), so their snapshots'
        `started_at` tells them from jobs held ahead of a slot. Only jobs still held
        under the given claims are marked, once each; returns how many were."""
        ...

    async def cancel(self, job_id: int) -> bool:
        """Cancel a queued or running job: it becomes cancelled and never runs (again); a
        running handler hears of it within about a second (W9). Returns True, or False when the
        job had finished already or does not exist (R25)."""
        ...

    async def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """Wait until the job is done, dead or cancelled, at most `timeout` seconds, and
        return its snapshot then (or as it is when the time is up); None for an unknown
        id (R26)."""
        ...

    async def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        """`record` holds `host`, `pid`, `queues`, `kinds`,
        `concurrency`, `heartbeat_seconds` and `running`; written at the worker's start and
        on each heartbeat (one statement when its record is there) (R33)."""
        ...

    async def forget_worker(self, name: str) -> None:
        """Remove a worker's record, as a worker stopping cleanly does (R33)."""
        ...

    async def workers(self) -> list[WorkerInfo]:
        """The workers seen in the last hour, by name; `gone` when not seen for
        three heartbeats (R33)."""
        ...

    async def now(self) -> float:
        """The queue's clock in epoch seconds (R20), for code that must agree with it."""
        ...

    async def close(self) -> None:
        """Close the queue: `Queue.close`, awaited.

        The same arguments, answer and errors."""
        ...

    async def __aenter__(self) -> AsyncQueue: ...

    async def __aexit__(self, *exc: object) -> None: ...


class Listener(Protocol):
    """A connection that hears about new jobs (PostgreSQL LISTEN); what `listen()` returns where
    the database can notify."""

    def reaches_itself(self, timeout: float) -> bool:
        """Send a notification the way enqueue does and say whether it came back."""
        ...

    def wait(self, timeout: float) -> list[str]:
        """Names of the queues that got new jobs, or [] after `timeout` seconds."""
        ...

    def cancelled(self) -> list[int]:
        """The ids of the jobs whose cancel it heard since the last call (W9)."""
        ...

    def close(self) -> None:
        """Stop listening and close the listening connection."""
        ...
