"""Handlers for the tests that start real worker processes."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import time
from pathlib import Path

from queuecore import Job, Registry, current_lease
from queuecore.demo.jobs import record
from queuecore.protocol import Effect
from queuecore.worker.processes.shared import supervisor_pid

REGISTRY = Registry()


@REGISTRY.handler("slow")
def slow(job: Job) -> None:
    """Says it started (a file the test waits for), then takes its time."""
    Path(job.payload["started"]).touch()
    time.sleep(job.payload["seconds"])


@REGISTRY.handler("quick")
def quick(job: Job) -> None:
    return None


@REGISTRY.handler("imported")
def imported(job: Job) -> list[str]:
    """Which of the modules the payload names were imported in the handler process
    before this job ran (this handler imports none)."""
    return [name for name in job.payload["modules"] if name in sys.modules]


@REGISTRY.handler("raises")
def raises(job: Job) -> None:
    """Fails with the payload's message."""
    raise RuntimeError(job.payload["message"])


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


@REGISTRY.handler("crash")
def crash(job: Job) -> None:
    """Ends its own process the way the payload says, as a handler's bug or the kernel
    would: SIGKILL (the OOM killer's signal), a segfault, or os._exit."""
    how = job.payload["how"]
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "segfault":
        ctypes.string_at(0)
    os._exit(job.payload.get("code", 3))


@REGISTRY.handler("crash-in-effect")
def crash_in_effect(job: Job) -> Effect:
    """Returns an effect that ends its process inside the completion's transaction."""

    def effect(conn: object) -> None:
        os._exit(3)

    return effect


@REGISTRY.handler("watch-lease")
def watch_lease(job: Job) -> None:
    """Says it started, waits to hear that its lease was lost (W3), and writes down
    whether it did."""
    Path(job.payload["started"]).touch()
    lost = current_lease().lost.wait(job.payload["seconds"])
    Path(job.payload["seen"]).write_text("lost" if lost else "kept")


#: A second application's registry on the same database: it knows only this kind.
REPORTS = Registry()


@REPORTS.handler("sales_report")
def sales_report(job: Job) -> Effect:
    return record(job)


@REGISTRY.handler("tally")
def tally(job: Job) -> None:
    """Writes down that it started (its kind, the worker it ran under, its id) in the
    payload's file, then takes the payload's seconds: the tests count handler starts
    there, not in the queue's own tables."""
    with open(job.payload["log"], "a") as out:
        out.write(f"{job.payload.get('tag', '-')} {supervisor_pid()} {job.id}\n")
    time.sleep(job.payload.get("seconds", 0))


@REGISTRY.handler("watch-cancel")
def watch_cancel(job: Job) -> None:
    """Says it started, waits to hear that its job was lost (W9: cancelled), and writes
    down the wall-clock time it heard, for the test to compare with its cancel."""
    Path(job.payload["started"]).touch()
    if current_lease().lost.wait(job.payload["seconds"]):
        Path(job.payload["seen"]).write_text(repr(time.time()))


#: A regular expression that backtracks for minutes inside the `re` module's C code,
#: which holds the interpreter's lock throughout: no other thread of its process runs.
HOG_PATTERN, HOG_TEXT = r"(?:a|a)*b", "a" * 32


def say_pid(path: str) -> None:
    """Write this process's pid where a test waits for it (whole, or not at all)."""
    Path(f"{path}.tmp").write_text(str(os.getpid()))
    os.replace(f"{path}.tmp", path)


@REGISTRY.handler("hogs")
def hogs(job: Job) -> None:
    """Says its pid, then holds its process's interpreter lock for minutes: the handler
    process's own threads cannot act until it returns."""
    say_pid(job.payload["pid"])
    re.fullmatch(HOG_PATTERN, HOG_TEXT)
