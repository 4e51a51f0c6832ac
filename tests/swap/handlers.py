"""The application's handlers for the swap tests. Each run writes a start and an end line
(job id, attempt, pid, time) to $SWAP_RUN_LOG, so a test can see every run of every job."""

from __future__ import annotations

import os
import time

import queuecore

REGISTRY = queuecore.Registry()


def _log(event: str, job: queuecore.Job) -> None:
    with open(os.environ["SWAP_RUN_LOG"], "a") as log:
        log.write(f"{event} {job.id} {job.attempts} {os.getpid()} {time.time():.6f}\n")


@REGISTRY.handler("work")
def work(job: queuecore.Job) -> None:
    _log("start", job)
    time.sleep(job.payload.get("seconds", 0))
    _log("end", job)


@REGISTRY.handler("poison")
def poison(job: queuecore.Job) -> None:
    _log("start", job)
    raise queuecore.Permanent("this job can never succeed")
