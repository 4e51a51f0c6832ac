"""The values the queue hands back: a claimed job, an enqueue result, a snapshot."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, overload


@overload
def to_datetime(epoch_seconds: float) -> datetime: ...
@overload
def to_datetime(epoch_seconds: None) -> None: ...
@overload
def to_datetime(epoch_seconds: float | None) -> datetime | None: ...
def to_datetime(epoch_seconds: float | None) -> datetime | None:
    """Times are stored as epoch seconds; people and status endpoints want datetimes.
    A NOT NULL column's value gives a datetime, a nullable one's may give None."""
    if epoch_seconds is None:
        return None
    return datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    id: int
    created: bool


@dataclass(slots=True)
class Job:
    """A job held under a lease. `lease_token` is the fence every report must carry."""

    id: int
    kind: str
    payload: dict[str, Any]
    queue: str
    priority: int
    attempts: int
    max_attempts: int
    lease_token: str
    lease_expires_at: datetime
    #: The enqueuing caller's trace context (`queuecore.core.tracing`), None when untraced.
    trace_context: str | None = None
    #: When this attempt became ready to run (enqueued, its delay or backoff over, or a
    #: lost lease's end), on the queue's clock: the start of its time in queue. None for
    #: a job not handed out by a claim (`queuecore.testing.make_job`).
    ready_at: datetime | None = None


class Completions(list[bool]):
    """What `complete_many` answers: one bool per job, in the order given (True: completed).

    A job reported False stays as it was: its fence failed (another claim holds it, or it
    is no longer running), or its effect raised; then `errors[index]` holds that exception,
    and the job is still running under its lease, so it can be failed or retried."""

    __slots__ = ("errors",)

    def __init__(self, iterable: Iterable[bool] = ()) -> None:
        super().__init__(iterable)
        self.errors: dict[int, Exception] = {}


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """A read-only view of one row, for status endpoints and the dead-letter list."""

    id: int
    kind: str
    queue: str
    payload: dict[str, Any]
    priority: int
    state: str
    attempts: int
    max_attempts: int
    last_error: str | None
    worker: str | None
    dedupe_key: str | None
    created_at: datetime
    visible_at: datetime
    finished_at: datetime | None
    #: What the completion handed back (R24); None while there is none.
    result: Any = None
    #: Every failed attempt, oldest first, the last 20 (R32): each a mapping with
    #: `attempt` (int), `at` (a UTC datetime) and `error` (text, cut as R11 cuts it).
    errors: list[dict[str, Any]] = field(default_factory=list)
    #: When a worker's slot started this attempt's handler (W9), noted within about half
    #: a second; None while the job is held ahead of a slot (state "running", not
    #: started yet) or was never started. A claim sets it back to None.
    started_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """In a terminal state (done, dead or cancelled): it will not change by itself."""
        return self.state in ("done", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as its record in the database says (R33): what it serves, and when it
    was last seen. `gone`: not seen for three of its heartbeats (it crashed, or its host
    did); a gone record is dropped an hour after it was last seen."""

    name: str
    host: str
    pid: int
    queues: list[str] | None  # None: every queue
    kinds: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    #: The jobs it held at its last heartbeat: running, or claimed ahead of its slots.
    running: int
    heartbeat_seconds: float
    gone: bool
