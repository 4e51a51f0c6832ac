"""A worker's options, checked once for every kind of worker (`queuecore.Worker` on
threads, `queuecore.AsyncWorker` on an event loop): the same names, defaults, errors
and derived values (the heartbeat from the queue's lease, the worker's name)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from queuecore.core import validate
from queuecore.handling import DEFAULT_MAX_RESULT_BYTES
from queuecore.worker.time_limits import TimeLimits, time_limits

#: Seconds a handler process may run on after its lease was lost (W9): then it is killed.
DEFAULT_CANCEL_GRACE = 10.0


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int
    queues: list[str] | None
    name: str
    #: Jobs claimed ahead of the slots; None: as many as about 50 ms of work (claimer.py).
    prefetch: int | None
    poll_interval: float
    heartbeat_seconds: float
    grace_seconds: float
    exit_when_idle: float | None
    ack_batch: int
    ack_seconds: float
    #: The result size a handler may return (R24): checked where the handler runs.
    max_result_bytes: int
    #: When a running handler is stopped (W8, W9): its time limit, the cancel grace.
    limits: TimeLimits


def worker_settings(
    queue: Any,
    handlers: Mapping[str, Any],
    *,
    concurrency: int,
    queues: Iterable[str] | None,
    name: str | None,
    prefetch: int | None,
    poll_interval: float,
    heartbeat_seconds: float | None,
    grace_seconds: float,
    exit_when_idle: float | None,
    ack_batch: int,
    ack_seconds: float,
    timeout: float | None = None,
    cancel_grace: float | None = DEFAULT_CANCEL_GRACE,
) -> WorkerSettings:
    """Check a worker's options (R22: bad input raises at once, naming the option)."""
    if not isinstance(handlers, Mapping):
        raise TypeError(f"handlers must be a mapping of kind -> handler, got {handlers!r}")
    if not handlers:
        raise ValueError("handlers must name at least one kind: a worker claims only those")
    concurrency = validate.at_least("concurrency", concurrency, 1)
    names = None if queues is None else [validate.queue_name(q) for q in queues]
    if names == []:
        raise ValueError("queues must name at least one queue, or be None for all")
    if heartbeat_seconds is None:
        lease_seconds = getattr(queue, "lease_seconds", None)
        if lease_seconds is None:
            raise ValueError("pass heartbeat_seconds: this queue does not say its lease")
        heartbeat_seconds = lease_seconds / 3
    return WorkerSettings(
        concurrency=concurrency,
        queues=names,
        name=validate.text("name", name or f"{socket.gethostname()}-{os.getpid()}"),
        prefetch=None if prefetch is None else validate.at_least("prefetch", prefetch, 0),
        poll_interval=validate.positive_seconds("poll_interval", poll_interval),
        heartbeat_seconds=validate.positive_seconds("heartbeat_seconds", heartbeat_seconds),
        grace_seconds=validate.non_negative_seconds("grace_seconds", grace_seconds),
        exit_when_idle=None
        if exit_when_idle is None
        else validate.non_negative_seconds("exit_when_idle", exit_when_idle),
        ack_batch=validate.at_least("ack_batch", ack_batch, 1),
        ack_seconds=validate.non_negative_seconds("ack_seconds", ack_seconds),
        max_result_bytes=getattr(queue, "max_result_bytes", None) or DEFAULT_MAX_RESULT_BYTES,
        limits=time_limits(
            handlers,
            None if timeout is None else validate.positive_seconds("timeout", timeout),
            None
            if cancel_grace is None
            else validate.non_negative_seconds("cancel_grace", cancel_grace),
        ),
    )
