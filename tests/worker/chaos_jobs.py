"""The handlers of the W7 chaos run (issue 8's tutorial run): ordinary jobs, jobs that
stall their whole worker past the lease once, poison jobs that end their process with
os._exit(1) on every attempt, and jobs that always raise. Every good one returns the
demo's ledger effect, so a second completion would show as a second row."""

from __future__ import annotations

import os

from queuecore import Job, Registry
from queuecore.demo.jobs import freeze_this_process, hopeless, ordinary, record
from queuecore.protocol import Effect

REGISTRY = Registry({"ordinary": ordinary, "hopeless": hopeless})


@REGISTRY.handler("stall")
def stall(job: Job) -> Effect:
    if job.attempts == 1:
        freeze_this_process(job.payload["freeze_s"])
    return record(job)


@REGISTRY.handler("poison")
def poison(job: Job) -> None:
    os._exit(1)
