"""Handlers with known outcomes, for a worker whose metrics the test then reads."""

from __future__ import annotations

import os

import sqlalchemy as sa

import queuecore
from queuecore import Job, Permanent, Retry, current_lease
from queuecore.sql.schema import jobs

DSN_VARIABLE = "QUEUECORE_METRICS_TEST_DSN"


def ok(job: Job) -> None:
    return None


def flaky(job: Job) -> None:
    if job.attempts == 1:
        raise Retry(0)


def bad(job: Job) -> None:
    raise Permanent("bad input")


def hopeless(job: Job) -> None:
    raise RuntimeError("always")


def stolen(job: Job) -> None:
    """Another claim takes the job over while it runs: its completion is fenced off."""
    engine = sa.create_engine(os.environ[DSN_VARIABLE])
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job.id).values(lease_token="taken"))
    engine.dispose()


def cancelled(job: Job) -> None:
    """Cancelled while it runs (R25): its completion is fenced off too, for that reason."""
    queue = queuecore.connect(os.environ[DSN_VARIABLE])
    try:
        assert queue.cancel(job.id)
    finally:
        queue.close()


def until_lost(job: Job) -> None:
    """Waits for a heartbeat to find the lease lost, then returns (refused as well)."""
    if not current_lease().lost.wait(60):
        raise RuntimeError("no heartbeat found the lease lost")


def stolen_then_waits(job: Job) -> None:
    stolen(job)
    until_lost(job)


def cancelled_then_waits(job: Job) -> None:
    cancelled(job)
    until_lost(job)


REGISTRY = {
    "ok": ok,
    "flaky": flaky,
    "bad": bad,
    "hopeless": hopeless,
    "stolen": stolen,
    "cancelled": cancelled,
    "stolen_then_waits": stolen_then_waits,
    "cancelled_then_waits": cancelled_then_waits,
}
