"""R33 on the worker's side: its record in the database, written when it starts, again
every heartbeat interval (one statement per interval, not per job), and removed when it
stops cleanly. A worker that dies leaves its record behind, which `workers()` shows as
gone after three missed heartbeats."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from queuecore.executors.reconnect import connection_lost
from queuecore.observe.worklog import describe, log
from queuecore.protocol import AsyncQueue, Queue

Running = Callable[[], int]


def record(
    queues: Sequence[str] | None, kinds: Sequence[str], concurrency: int, every: float
) -> dict[str, Any]:
    """What a worker reports of itself, but for `running` (its held jobs at the time)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "queues": None if queues is None else list(queues),
        "kinds": list(kinds),
        "concurrency": concurrency,
        "heartbeat_seconds": every,
    }


def keep_record(
    queue: Queue, name: str, mine: dict[str, Any], running: Running, finished: threading.Event
) -> None:
    """A worker thread's loop: until `finished`, then the record goes."""
    every = mine["heartbeat_seconds"]
    while True:
        _reported(queue.report_worker, name, {**mine, "running": running()})
        if finished.wait(every):
            break
    _reported(queue.forget_worker, name)


async def keep_record_async(
    queue: AsyncQueue, name: str, mine: dict[str, Any], running: Running, finished: asyncio.Event
) -> None:
    """`keep_record` as a task of the async worker."""
    every = mine["heartbeat_seconds"]
    while True:
        try:
            await queue.report_worker(name, {**mine, "running": running()})
        except Exception as exc:
            _failed(exc)
        try:
            await asyncio.wait_for(finished.wait(), every)
            break
        except asyncio.TimeoutError:
            continue
    try:
        await queue.forget_worker(name)
    except Exception as exc:
        _failed(exc)


def _reported(report: Callable[..., None], *args: Any) -> None:
    try:
        report(*args)
    except Exception as exc:
        _failed(exc)


def _failed(exc: Exception) -> None:
    """A worker's record is for people: failing to write it never stops the worker."""
    if not connection_lost(exc):  # an outage is logged by the queue, once
        log.warning("could not write this worker's record (%s)", describe(exc))
