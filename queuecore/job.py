"""The values the queue hands back: a claimed job, an enqueue result, a snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


def to_datetime(epoch_seconds: float | None) -> datetime | None:
    """Times are stored as epoch seconds; people and status endpoints want datetimes."""
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
