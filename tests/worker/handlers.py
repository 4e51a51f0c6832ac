"""Handlers for the tests that start real worker processes."""

from __future__ import annotations

import time
from pathlib import Path

from queuecore import Job, Registry

REGISTRY = Registry()


@REGISTRY.handler("slow")
def slow(job: Job) -> None:
    """Says it started (a file the test waits for), then takes its time."""
    Path(job.payload["started"]).touch()
    time.sleep(job.payload["seconds"])


@REGISTRY.handler("quick")
def quick(job: Job) -> None:
    return None
