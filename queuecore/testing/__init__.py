"""Helpers for testing handlers, and the code around them, without a worker process.

- `run_handler(handler, payload)` runs one handler on a made-up job, with its lease in
  reach of `current_lease()`, and says what it came to (an `Outcome`);
- `make_job(...)` builds a `Job` with sensible defaults, for code that takes one;
- `drain(queue, handlers)` runs every ready job of a real queue in this process, reports
  each outcome to the queue as a worker would, and says what happened to each job;
  given a `FakeClock`, it moves the clock on to each retry instead of waiting for it;
- `FakeClock` is a clock moved by hand, for `queuecore.connect(clock=...)` (R20).

The pytest fixtures built on these (`queuecore_queue`, `queuecore_clock`) live in
`queuecore.testing.pytest_plugin`, which pytest loads by itself once queuecore is installed.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

from sqlalchemy import func, select

from queuecore.handling import (
    DEFAULT_MAX_RESULT_BYTES,
    Handler,
    Lease,
    Permanent,
    Retry,
    error_text,
)
from queuecore.handling import run_handler as run_with_lease
from queuecore.job import Job
from queuecore.protocol import Effect, Queue
from queuecore.sql.schema import LIVE, jobs

#: Where a `FakeClock` starts unless told: a fixed instant, so test runs repeat exactly.
FAKE_START = 1_700_000_000.0

# --- running one handler ---------------------------------------------------------------

Status = Literal["completed", "retry", "permanent", "error"]


@dataclass(frozen=True)
class Outcome:
    """What one run of a handler came to, read the way the worker reads it (W1).

    - `completed`: it returned; `effect` is the `f(conn)` it returned, or None, and
      `result` the job's result (a JSON value, R24), or None;
    - `retry`: it raised `Retry`; `retry_in` is the delay it asked for;
    - `permanent`: it raised `Permanent`;
    - `error`: it raised anything else, or returned a result that cannot be stored
      (not JSON, or over the size limit).

    `error` holds the exception in the three failing cases.
    """

    status: Status
    effect: Effect | None = None
    result: Any = None
    retry_in: float | None = None
    error: Exception | None = None

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def outcome_of(
    handler: Handler, lease: Lease, *, max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
) -> Outcome:
    """Run `handler` on `lease.job` with the lease in reach of `current_lease()`, and read
    its return value as the worker does (`queuecore.handling.completion_of`)."""
    try:
        done = run_with_lease(handler, lease, max_result_bytes=max_result_bytes)
    except Retry as exc:
        return Outcome("retry", retry_in=exc.seconds, error=exc)
    except Permanent as exc:
        return Outcome("permanent", error=exc)
    except Exception as exc:
        return Outcome("error", error=exc)
    return Outcome("completed", effect=done.effect, result=done.result)


def make_job(
    kind: str = "test",
    payload: Mapping[str, Any] | None = None,
    *,
    id: int = 1,
    queue: str = "default",
    priority: int = 0,
    attempts: int = 1,
    max_attempts: int = 5,
    lease_token: str | None = None,
    lease_expires_at: datetime | None = None,
) -> Job:
    """A job as a claim hands it out: its first attempt, a fresh token, a 30 s lease."""
    return Job(
        id=id,
        kind=kind,
        payload=dict(payload or {}),
        queue=queue,
        priority=priority,
        attempts=attempts,
        max_attempts=max_attempts,
        lease_token=lease_token or secrets.token_hex(16),
        lease_expires_at=lease_expires_at or datetime.now(timezone.utc) + timedelta(seconds=30),
    )


def run_handler(
    handler: Handler,
    payload: Mapping[str, Any] | None = None,
    *,
    attempts: int = 1,
    lost: bool = False,
    job: Job | None = None,
    **job_fields: Any,
) -> Outcome:
    """Run `handler` once on a job made by `make_job(payload=payload, attempts=attempts,
    **job_fields)` (or on `job`), as a worker would. `lost=True` runs it with its lease
    already lost, as after a heartbeat found another worker holding the job (W3)."""
    if job is None:
        job = make_job(payload=payload, attempts=attempts, **job_fields)
    lease = Lease(job)
    if lost:
        lease.lost.set()
    return outcome_of(handler, lease)


# --- draining a real queue ----------------------------------------------------------------


class FakeClock:
    """Epoch seconds that move only when told: `queuecore.connect(dsn, clock=clock)`."""

    def __init__(self, now: float = FAKE_START) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds!r})")
        self.now += seconds


class MovableClock(Protocol):
    """What `drain` needs of a clock: to read it and to move it on (a `FakeClock` does)."""

    def __call__(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


Report = Literal["done", "queued", "dead", "lost"]


@dataclass(frozen=True)
class Drained:
    """One run of one job in `drain`: the job as claimed (its `attempts` says which
    attempt), what its handler came to, and what reporting that made of the job:
    `done`, `queued` (for a retry), `dead`, or `lost` (the fence refused the report)."""

    job: Job
    outcome: Outcome
    state: Report


def drain(
    queue: Queue,
    handlers: Mapping[str, Handler],
    *,
    clock: MovableClock | None = None,
    queues: Sequence[str] | None = None,
    worker: str = "queuecore-testing",
    max_runs: int = 10_000,
) -> list[Drained]:
    """Run every ready job in this process, one at a time, until none is ready; report
    each outcome to the queue as a worker does (effects commit with the completion).

    With `clock` (the queue's fake clock), jobs that wait (retries, delays) are not left
    behind: the clock is moved on to the next one and draining goes on until no job is
    queued at all. Stops with RuntimeError after `max_runs` runs, which only a job that
    keeps enqueuing more reaches.
    """
    runs: list[Drained] = []
    while len(runs) < max_runs:
        claimed = queue.claim(worker, limit=1, queues=queues)
        if not claimed:
            if clock is not None and _advance_to_next(queue, clock, queues):
                continue
            return runs
        job = claimed[0]
        handler = handlers.get(job.kind)
        if handler is None:
            outcome = Outcome("error", error=LookupError(f"no handler for kind {job.kind!r}"))
        else:
            limit = getattr(queue, "max_result_bytes", DEFAULT_MAX_RESULT_BYTES)
            outcome = outcome_of(handler, Lease(job), max_result_bytes=limit)
        runs.append(_report(queue, job, outcome))
    raise RuntimeError(f"drain stopped after {max_runs} runs with jobs still ready")


def _report(queue: Queue, job: Job, outcome: Outcome) -> Drained:
    if outcome.completed:
        try:
            done = queue.complete(job, effect=outcome.effect, result=outcome.result)
        except Exception as exc:  # the effect raised: rolled back, the job fails (R10)
            return _report(queue, job, Outcome("error", error=exc))
        return Drained(job, outcome, "done" if done else "lost")
    assert outcome.error is not None
    state = queue.fail(
        job,
        error_text(outcome.error),
        retry_in=outcome.retry_in,
        permanent=outcome.status == "permanent",
    )
    return Drained(job, outcome, state or "lost")


def _advance_to_next(queue: Queue, clock: MovableClock, queues: Sequence[str] | None) -> bool:
    """Move the clock to the moment the next live job becomes claimable; False when
    there is none later than now (nothing left, or only jobs of other queues)."""
    earliest = select(func.min(jobs.c.visible_at)).where(LIVE)
    if queues is not None:
        earliest = earliest.where(jobs.c.queue.in_(list(queues)))
    with queue.engine.connect() as conn:
        when = conn.execute(earliest).scalar()
    if when is None or when <= clock():
        return False
    clock.advance(when - clock())
    return True
