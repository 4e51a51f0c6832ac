"""The values the queue hands back: a claimed job, an enqueue result, a snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from operator import attrgetter
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


#: The key a stored text that is not JSON is shown under (W10).
NOT_JSON = "stored (not JSON)"


def shown_json(stored: str | None) -> Any:
    """A stored JSON column's text as its value, for a view of the job: text that is not
    JSON (a row written by hand, or damaged; SQLite does not check) shows as
    `{NOT_JSON: text}`, so one such row cannot break a listing, a job's page or a log
    line (W10)."""
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except ValueError:
        return {NOT_JSON: stored}


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


_PAYLOAD_SLOT: Any = Job.__dict__["payload"]  # where a Job keeps its payload
_JOB_FIELDS = attrgetter(*(f.name for f in fields(Job)))


class ClaimedJob(Job):
    """A job as a claim hands it out: its payload arrives as the JSON text the database
    stores and is decoded where it is first read. A worker hands its jobs to handler
    processes, so the decoding happens there, not on the worker's own busy threads;
    and a stored payload that is not JSON fails its own job, when its handler reads it,
    instead of every claim that meets its row (W10). Otherwise it is a `Job`: equal to
    the same `Job`, and `dataclasses.replace` makes one with the payload decoded."""

    __slots__ = ("_stored_payload",)
    _stored_payload: str | None  # the JSON text, until the payload is decoded

    @classmethod
    def read(
        cls,
        id: int,
        kind: str,
        stored_payload: str,
        queue: str,
        priority: int,
        attempts: int,
        max_attempts: int,
        lease_token: str,
        lease_expires_at: datetime,
        trace_context: str | None,
        ready_at: datetime | None,
    ) -> ClaimedJob:
        """The job whose payload is `stored_payload`, JSON text not decoded yet."""
        job = cls(
            id,
            kind,
            {},
            queue,
            priority,
            attempts,
            max_attempts,
            lease_token,
            lease_expires_at,
            trace_context,
            ready_at,
        )
        job._stored_payload = stored_payload
        return job

    @property
    def payload(self) -> dict[str, Any]:
        """The payload, decoded from its stored JSON when first read: a stored payload
        that is not JSON raises `ValueError` here, in the handler that reads it."""
        stored = self._stored_payload
        if stored is not None:
            try:
                self.payload = json.loads(stored)
            except ValueError as exc:  # a row written by hand, or damaged
                raise ValueError(f"job {self.id}'s stored payload is not JSON ({exc})") from exc
        decoded: dict[str, Any] = _PAYLOAD_SLOT.__get__(self, Job)
        return decoded

    @payload.setter
    def payload(self, value: dict[str, Any]) -> None:
        _PAYLOAD_SLOT.__set__(self, value)
        self._stored_payload = None

    @property
    def stored_payload(self) -> str:
        """The payload as JSON text: as stored while not decoded, else made again."""
        stored = self._stored_payload
        return json.dumps(self.payload) if stored is None else stored

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return bool(_JOB_FIELDS(self) == _JOB_FIELDS(other))

    __hash__ = None  # type: ignore[assignment]  # mutable, as a Job is

    def __repr__(self) -> str:
        """As a `Job`'s; a stored payload that is not JSON shows as its text, so a log
        line or a traceback that shows the job does not raise."""
        try:
            payload: object = self.payload
        except ValueError:
            payload = {NOT_JSON: self._stored_payload}
        shown = (
            f"{each.name}={payload if each.name == 'payload' else getattr(self, each.name)!r}"
            for each in fields(self)
            if each.repr
        )
        return f"{type(self).__qualname__}({', '.join(shown)})"


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
    #: As enqueued; a stored text that is not JSON (a row written by hand, or damaged)
    #: as `{"stored (not JSON)": text}`, as is such a `result` (W10).
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
