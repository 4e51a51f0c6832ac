"""How rows become answers, and checks on arguments that need no database: shared by every
executor through `queuecore.core.operations`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from queuecore.errors import DedupeConflict
from queuecore.job import ClaimedJob, Job, JobSnapshot, shown_json, to_datetime

# Where the columns of `statements.JOB_COLUMNS` (then `state`, `ready_at`) sit in a claim's rows.
(
    ID,
    KIND,
    PAYLOAD,
    QUEUE,
    PRIORITY,
    ATTEMPTS,
    MAX_ATTEMPTS,
    VISIBLE_AT,
    TRACE_CONTEXT,
    STATE,
    READY_AT,
) = range(11)


def claimed_jobs(rows: Iterable[Any], token: str) -> list[Job]:
    """A claim's rows (`statements.CLAIM_RETURNS`) as the jobs handed to the worker.
    Their leases end together, at the claim's lease end: that time is made a datetime
    once per claim, not once per job (the claimer's thread is one of the worker's three
    busiest)."""
    ends: dict[Any, datetime] = {}
    jobs: list[Job] = []
    for r in rows:
        end = ends.get(r[VISIBLE_AT])
        if end is None:
            end = ends[r[VISIBLE_AT]] = to_datetime(r[VISIBLE_AT])
        ready = r[READY_AT]
        jobs.append(
            ClaimedJob.read(
                r[ID],
                r[KIND],
                r[PAYLOAD],
                r[QUEUE],
                r[PRIORITY],
                r[ATTEMPTS],
                r[MAX_ATTEMPTS],
                token,
                end,
                r[TRACE_CONTEXT],
                None if ready is None else to_datetime(ready),
            )
        )
    return jobs


def snapshot(row: Any) -> JobSnapshot:
    """A row read through `statements.seen`: its payload and result come as JSON text."""
    return JobSnapshot(
        id=row.id,
        kind=row.kind,
        queue=row.queue,
        payload=shown_json(row.payload),
        priority=row.priority,
        state=row.state,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        last_error=row.last_error,
        worker=row.worker,
        dedupe_key=row.dedupe_key,
        created_at=to_datetime(row.created_at),
        visible_at=to_datetime(row.visible_at),
        finished_at=to_datetime(row.finished_at),
        result=shown_json(row.result),
        errors=attempt_errors(row.errors),
        started_at=to_datetime(row.started_at),
    )


def attempt_errors(stored: Any) -> list[dict[str, Any]]:
    """R32's history as stored (JSON, times in epoch seconds) for people: datetimes."""
    return [
        {"attempt": int(e["attempt"]), "at": to_datetime(float(e["at"])), "error": e["error"]}
        for e in stored or ()
    ]


def per_job(name: str, values: Sequence[Any] | None, count: int) -> list[Any]:
    """One entry per job, or None for every job."""
    if values is None:
        return [None] * count
    if isinstance(values, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be a sequence with one entry per job, got {values!r}")
    listed = list(values)
    if len(listed) != count:
        raise ValueError(
            f"{name} must have one entry (or None) per job: {len(listed)} {name} for {count} jobs"
        )
    return listed


def same_work(row: Mapping[str, Any], existing: Any) -> None:
    """R27: a dedupe key names one piece of work; the same key with another kind or
    payload is a mistake that returning the existing job would hide."""
    if existing.kind != row["kind"]:
        raise DedupeConflict(row["dedupe_key"], existing.id, "kind")
    if existing.payload != json.loads(json.dumps(row["payload"])):
        raise DedupeConflict(row["dedupe_key"], existing.id, "payload")


def stats(
    live: Sequence[Any], dead: Sequence[Any], cancelled: Sequence[Any], queue: str | None
) -> dict[str, Any]:
    """`stats()` from the three counting queries' rows (R16)."""
    per_queue: dict[str, dict[str, Any]] = {}
    per_kind: dict[str, dict[str, Any]] = {}
    for name, kind, state, count, ready_now, oldest, started in live:
        entries = [per_queue.setdefault(name, _empty_stats())]
        if state != "dead":  # dead by R08, not yet written: counted per queue only
            entries.append(_kind_entry(per_kind, kind))
        if state == "running":  # W9: claimed, its handler not started (yet)
            entries[0]["held_ahead"] += count - started
        for entry in entries:
            entry[state] += count
            entry["ready_now"] += ready_now
            if oldest is not None:
                entry["oldest_ready_age_s"] = max(entry["oldest_ready_age_s"], float(oldest))
    for name, count in dead:
        per_queue.setdefault(name, _empty_stats())["dead"] += count
    for name, count in cancelled:
        per_queue.setdefault(name, _empty_stats())["cancelled"] = count
    if queue is not None:
        return per_queue.get(queue, _empty_stats())
    overall = _empty_stats()
    for entry in per_queue.values():
        for key in ("queued", "running", "held_ahead", "ready_now", "dead", "cancelled"):
            overall[key] += entry[key]
        overall["oldest_ready_age_s"] = max(
            overall["oldest_ready_age_s"], entry["oldest_ready_age_s"]
        )
    overall["queues"] = per_queue
    overall["kinds"] = per_kind
    return overall


def _kind_entry(per_kind: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    """Live jobs of one kind over all queues; dead ones are counted per queue only (the
    dead-rows index has no kind, and counting finished rows by kind would scan them)."""
    empty = {"queued": 0, "running": 0, "ready_now": 0, "oldest_ready_age_s": 0.0}
    return per_kind.setdefault(kind, empty)


def _empty_stats() -> dict[str, Any]:
    return {
        "queued": 0,
        "running": 0,
        "held_ahead": 0,
        "ready_now": 0,
        "oldest_ready_age_s": 0.0,
        "dead": 0,
        "cancelled": 0,
    }
