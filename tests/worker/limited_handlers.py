"""Handlers for the tests of time limits, the cancel grace and poison input (W8 to W10),
in registries that real `queuecore worker` processes import, as an application's would.

Each handler writes what it does into the file its payload names (`log`), one line per
step ("start ID TIME", "end ID TIME"), so a test counts handler starts and ends from
the handlers' side, not from the queue's tables, and reads when each began."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from queuecore import Job, Registry

#: The time limit the tests give: short, so the tests stay cheap.
LIMIT = 2.0
#: Longer than any test waits: a handler that sleeps this long never returns by itself.
FOREVER = 3600.0


def note(job: Job, step: str) -> None:
    """One line in the job's log file, appended in one write (handlers of several
    processes may share the file)."""
    line = f"{step} {job.id} {time.time():.6f}\n".encode()
    fd = os.open(job.payload["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def steps(log: Path) -> list[tuple[str, int, float]]:
    """The lines the handlers wrote: (step, job id, time.time())."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        step, job_id, at = line.split()
        found.append((step, int(job_id), float(at)))
    return found


SYNC = Registry()


@SYNC.handler("hang", timeout=LIMIT)
def hang(job: Job) -> None:
    """A handler that does not return in time (a socket read with no timeout, a
    deadlock); `seconds` bounds it where a thread left behind would linger (in-process)."""
    note(job, "start")
    time.sleep(job.payload.get("seconds", FOREVER))
    note(job, "end")


@SYNC.handler("deaf")
def deaf(job: Job) -> None:
    """A long handler that never looks at `current_lease().lost`."""
    note(job, "start")
    time.sleep(job.payload.get("seconds", FOREVER))
    note(job, "end")


@SYNC.handler("note")
def noted(job: Job) -> None:
    """A short job: starts and ends."""
    note(job, "start")
    note(job, "end")


@SYNC.handler("echo")
def echo(job: Job) -> Any:
    """Returns its payload as its result, as a handler that stores what it was given
    would: a result holds only what R29 allows, so a deep payload fails here."""
    note(job, "start")
    return job.payload


ASYNC = Registry()


@ASYNC.handler("async-hang", timeout=LIMIT)
async def async_hang(job: Job) -> None:
    """An `async def` handler that never returns by itself, but can be cancelled."""
    note(job, "start")
    await asyncio.sleep(job.payload.get("seconds", FOREVER))
    note(job, "end")


@ASYNC.handler("async-stubborn", timeout=LIMIT)
async def async_stubborn(job: Job) -> None:
    """An `async def` handler that swallows its cancel and keeps its task going: only
    killing its process stops it."""
    note(job, "start")
    deadline = time.monotonic() + FOREVER
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(FOREVER)
    note(job, "end")


@ASYNC.handler("async-note")
async def async_noted(job: Job) -> None:
    note(job, "start")
    note(job, "end")


@ASYNC.handler("async-echo")
async def async_echo(job: Job) -> Any:
    note(job, "start")
    return job.payload
