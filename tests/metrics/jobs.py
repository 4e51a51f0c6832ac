"""Handlers with known outcomes, for a worker whose metrics the test then reads."""

from __future__ import annotations

import os

import sqlalchemy as sa

from queuecore import Job, Permanent, Retry
from queuecore.schema import jobs

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


REGISTRY = {"ok": ok, "flaky": flaky, "bad": bad, "hopeless": hopeless, "stolen": stolen}
