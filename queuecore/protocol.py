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
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from sqlalchemy import URL, Connection, Engine

from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo

if TYPE_CHECKING:  # the asyncio extension needs greenlet: the async extra only
    from sqlalchemy.ext.asyncio import AsyncConnection

Effect = Callable[[Connection], object]
"""A database effect: called with the completing transaction's connection (R10)."""

AsyncEffect = Callable[["AsyncConnection"], Awaitable[object]]
"""An effect of the async queue, awaited with the completing transaction's connection."""


@runtime_checkable
class Queue(Protocol):
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
    ) -> EnqueueResult: ...

    def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: Connection | None = None,
    ) -> list[int]: ...

    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]: ...

    def complete(self, job: Job, *, effect: Effect | None = None, result: Any = None) -> bool:
        """R09, R10; `result` (any JSON value, R24) is stored with the completion."""
        ...

    def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions: ...

    def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None: ...

    def heartbeat(self, job: Job) -> bool: ...

    def release(self, job: Job) -> bool: ...

    def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]: ...

    def stats(self, queue: str | None = None) -> Mapping[str, Any]: ...

    def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int: ...

    def get(self, job_id: int) -> JobSnapshot | None: ...

    def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        """The dead-letter list, newest first, R08's lost leases included."""
        ...

    def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        """R31: jobs in id order after `after_id`, at most `limit`; `state`, `kind` and
        `queue` each filter by one value or a list (None: all)."""
        ...

    def held(self, jobs: Sequence[Job]) -> list[bool]:
        """W9: per job, whether its claim still holds it (its fence would pass); a read
        that writes nothing, for workers: a cancelled job claimed ahead never starts."""
        ...

    def cancel(self, job_id: int) -> bool:
        """R25: a queued or running job becomes cancelled (terminal); False otherwise."""
        ...

    def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26: the snapshot once terminal, or as it is at the timeout; None if unknown."""
        ...

    def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        """R33, for workers: `record` holds `host`, `pid`, `queues`, `kinds`,
        `concurrency`, `heartbeat_seconds` and `running`; written at the worker's start and
        on each heartbeat (one statement when its record is there)."""
        ...

    def forget_worker(self, name: str) -> None:
        """R33: a worker that stops cleanly removes its record."""
        ...

    def workers(self) -> list[WorkerInfo]:
        """R33: the workers seen in the last hour, by name; `gone` when not seen for
        three heartbeats."""
        ...

    def now(self) -> float:
        """The queue's clock in epoch seconds (R20), for code that must agree with it."""
        ...

    def listen(self) -> Listener | None:
        """A connection that hears of new jobs, for idle workers (W6); None: poll."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Queue: ...

    def __exit__(self, *exc: object) -> None: ...


class BackendClass(Protocol):
    """What `connect`, `migrate` and `copy` need of a backend's class (the entry point's
    object): it makes queues, and it answers for the database before there is a queue."""

    def __call__(self, bind: str | URL | Engine, **options: Any) -> Queue: ...

    def create_engine(self, bind: str | URL | Engine, **options: Any) -> Engine:
        """An engine set up for this database (pragmas, transaction start, pool)."""
        ...

    def id_sequence(self, conn: Connection) -> int:
        """The last job id the table has handed out (0 before the first), purged ones too."""
        ...

    def advance_id_sequence(self, conn: Connection, at_least: int) -> None:
        """Make the next id the table hands out greater than `at_least` (never lower it)."""
        ...

    def migrating(self, engine: Engine) -> AbstractContextManager[object]:
        """Held while migrations run on `conn`: two processes migrating one database
        take turns."""
        ...

    async def open_async(self, url: URL, ops_options: dict[str, Any], **options: Any) -> Any:
        """The async queue's driver for this database (`queuecore.connect_async`)."""
        ...


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
    ) -> EnqueueResult: ...

    async def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> list[int]: ...

    async def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]: ...

    async def complete(
        self, job: Job, *, effect: AsyncEffect | Effect | None = None, result: Any = None
    ) -> bool:
        """R09, R10; `result` (any JSON value, R24) is stored with the completion."""
        ...

    async def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[AsyncEffect | Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions: ...

    async def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None: ...

    async def heartbeat(self, job: Job) -> bool: ...

    async def release(self, job: Job) -> bool: ...

    async def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]: ...

    async def stats(self, queue: str | None = None) -> Mapping[str, Any]: ...

    async def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int: ...

    async def get(self, job_id: int) -> JobSnapshot | None: ...

    async def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        """The dead-letter list, newest first, R08's lost leases included."""
        ...

    async def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        """R31: jobs in id order after `after_id`, at most `limit`; `state`, `kind` and
        `queue` each filter by one value or a list (None: all)."""
        ...

    async def held(self, jobs: Sequence[Job]) -> list[bool]:
        """W9: per job, whether its claim still holds it (its fence would pass); a read
        that writes nothing, for workers: a cancelled job claimed ahead never starts."""
        ...

    async def cancel(self, job_id: int) -> bool:
        """R25: a queued or running job becomes cancelled (terminal); False otherwise."""
        ...

    async def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26: the snapshot once terminal, or as it is at the timeout; None if unknown."""
        ...

    async def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        """R33, for workers: `record` holds `host`, `pid`, `queues`, `kinds`,
        `concurrency`, `heartbeat_seconds` and `running`; written at the worker's start and
        on each heartbeat (one statement when its record is there)."""
        ...

    async def forget_worker(self, name: str) -> None:
        """R33: a worker that stops cleanly removes its record."""
        ...

    async def workers(self) -> list[WorkerInfo]:
        """R33: the workers seen in the last hour, by name; `gone` when not seen for
        three heartbeats."""
        ...

    async def now(self) -> float:
        """The queue's clock in epoch seconds (R20), for code that must agree with it."""
        ...

    async def close(self) -> None: ...

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

    def close(self) -> None: ...
