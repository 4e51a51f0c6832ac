"""Handlers for the tests that start real worker processes."""

from __future__ import annotations

import time
from pathlib import Path

from queuecore import Job, Registry
from queuecore.demo_jobs import record
from queuecore.protocol import Effect

REGISTRY = Registry()


@REGISTRY.handler("slow")
def slow(job: Job) -> None:
    """Says it started (a file the test waits for), then takes its time."""
    Path(job.payload["started"]).touch()
    time.sleep(job.payload["seconds"])


@REGISTRY.handler("quick")
def quick(job: Job) -> None:
    return None


@REGISTRY.handler("recorded")
def recorded(job: Job) -> Effect:
    """Says it ran (a file the test waits for), then returns the demo's ledger effect,
    which counts how many completions committed."""
    Path(job.payload["ran"]).touch()
    return record(job)


@REGISTRY.handler("noted")
def noted(job: Job) -> None:
    """Says it ran (a file the test waits for), and returns no effect."""
    Path(job.payload["ran"]).touch()
