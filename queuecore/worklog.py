"""How the worker names jobs and errors in its log: one line each, never a payload."""

from __future__ import annotations

import logging

from queuecore.handling import Lease

log = logging.getLogger("queuecore.worker")


def label(lease: Lease) -> str:
    """How a job is named in the log: never its payload, which may hold secrets."""
    job = lease.job
    return (
        f"job {job.id} ({job.kind}, queue {job.queue}, attempt {job.attempts}/{job.max_attempts})"
    )


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


#: The command line's log lines, in a worker and in its handler processes alike.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
