"""The contract every backend satisfies. Code that uses a queue should type against this."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from sqlalchemy import Connection

from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot

Effect = Callable[[Connection], object]
"""A database effect: called with the completing transaction's connection (R10)."""


@runtime_checkable
class Queue(Protocol):
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

    def cancel(self, job_id: int) -> bool:
        """R25: a queued or running job becomes cancelled (terminal); False otherwise."""
        ...

    def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26: the snapshot once terminal, or as it is at the timeout; None if unknown."""
        ...

    def now(self) -> float:
        """The queue's clock in epoch seconds (R20), for code that must agree with it."""
        ...

    def close(self) -> None: ...


class Listener(Protocol):
    """A connection that hears about new jobs (PostgreSQL LISTEN); what `listen()` returns where
    the database can notify."""

    def reaches_itself(self, timeout: float) -> bool:
        """Send a notification the way enqueue does and say whether it came back."""
        ...

    def wait(self, timeout: float) -> list[str]:
        """Names of the queues that got new jobs, or [] after `timeout` seconds."""
        ...

    def close(self) -> None: ...
