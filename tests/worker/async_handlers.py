"""`async def` handlers (and a sync one beside them) for the async worker's tests, in a
registry that real `queuecore worker` processes import, as an application's would."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import threading
import time
from pathlib import Path

from queuecore import AsyncLease, Done, Job, Permanent, Registry, Retry, current_lease
from queuecore.demo.jobs import record
from queuecore.protocol import Effect
from tests.worker.handlers import HOG_PATTERN, HOG_TEXT, say_pid

REGISTRY = Registry()


async def wait_for_file(path: Path) -> None:
    while not path.exists():
        await asyncio.sleep(0.01)


@REGISTRY.handler("async-slow")
async def slow(job: Job) -> None:
    """Says it started, then takes its time on the loop (other tasks run meanwhile)."""
    Path(job.payload["started"]).touch()
    await asyncio.sleep(job.payload["seconds"])


@REGISTRY.handler("async-noted")
async def noted(job: Job) -> dict[str, int]:
    """Says it ran; its result names the job."""
    Path(job.payload["ran"]).touch()
    return {"job": job.id}


@REGISTRY.handler("async-recorded")
async def recorded(job: Job) -> Effect:
    """The demo's ledger effect, committed with the completion in the handler process."""
    Path(job.payload["ran"]).touch()
    return record(job)


@REGISTRY.handler("async-gate")
async def gate(job: Job) -> None:
    """Says it started, then waits (on the loop) until the test opens the gate file: two
    of these finish only if they run at once, as tasks of one loop."""
    Path(job.payload["started"]).touch()
    await wait_for_file(Path(job.payload["gate"]))


@REGISTRY.handler("async-crash")
async def crash(job: Job) -> None:
    """Ends its own process as the payload says (SIGKILL, a segfault or os._exit), once
    the file `wait` exists, or after blocking the loop until `block_until` exists."""
    if "wait" in job.payload:
        await wait_for_file(Path(job.payload["wait"]))
    if "block_until" in job.payload:  # hold the loop itself: no other task begins meanwhile
        Path(job.payload["blocking"]).touch()
        while not Path(job.payload["block_until"]).exists():
            time.sleep(0.01)
    how = job.payload["how"]
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "segfault":
        ctypes.string_at(0)
    os._exit(job.payload.get("code", 3))


@REGISTRY.handler("async-watch-lease")
async def watch_lease(job: Job) -> None:
    """Says it started, awaits the loss of its lease (W3), and writes down whether the
    asyncio twin and the threading event both said so."""
    lease = current_lease()
    assert isinstance(lease, AsyncLease)
    Path(job.payload["started"]).touch()
    with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError itself from 3.11 on
        await asyncio.wait_for(lease.lost_async.wait(), job.payload["seconds"])
    seen = "lost" if lease.lost_async.is_set() and lease.lost.is_set() else "kept"
    Path(job.payload["seen"]).write_text(seen)


@REGISTRY.handler("async-answers")
async def answers(job: Job) -> object:
    """Returns or raises what the payload asks for: a result, Done with an effect,
    Permanent, Retry, or a plain exception."""
    what = job.payload["what"]
    if what == "result":
        return {"answer": 42}
    if what == "done":
        return Done(result=[1, 2], effect=record(job))
    if what == "permanent":
        raise Permanent("bad input")
    if what == "retry":
        raise Retry(120, "come back later")
    raise ValueError("the payload was not what we hoped")


@REGISTRY.handler("sync-beside")
def sync_beside(job: Job) -> dict[str, object]:
    """A sync handler in an async registry: it runs on a thread, never on the loop's."""
    time.sleep(job.payload.get("seconds", 0))
    return {"thread": threading.current_thread().name, "lost": current_lease().lost.is_set()}


@REGISTRY.handler("async-hogs")
async def hogs(job: Job) -> None:
    """Says its pid, then holds its process's interpreter lock for minutes, its event
    loop with it."""
    say_pid(job.payload["pid"])
    re.fullmatch(HOG_PATTERN, HOG_TEXT)
