"""Running a handler on an event loop: `async def` handlers are awaited, sync ones (a
registry may mix both) run on a thread pool so they never block the loop. What either
came to is read by `queuecore.handling`, the one place that interprets a handler's
return value or exception, so an async handler returns what a sync one does (a JSON
result, an effect, `Done`) and raises what it does (`Permanent`, `Retry`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import Any, TypeGuard

from queuecore.core.tracing import handler_span
from queuecore.handling import (
    DEFAULT_MAX_RESULT_BYTES,
    Handler,
    Lease,
    Raised,
    Returned,
    completion_of,
    outcome_of,
    set_current_lease,
)
from queuecore.job import Job


class AsyncLease(Lease):
    """A `Lease` whose loss an `async def` handler can await: `current_lease().lost_async`
    is an `asyncio.Event` set together with `lost`, on the loop that runs the handler
    (`await asyncio.wait_for(current_lease().lost_async.wait(), seconds)`)."""

    __slots__ = ("lost_async",)

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self.lost_async = asyncio.Event()

    def mark_lost(self) -> bool:
        """Both signals at once; call it on the loop that owns `lost_async`."""
        first = super().mark_lost()
        self.lost_async.set()
        return first


def is_async_handler(handler: Handler) -> TypeGuard[Callable[[Job], Awaitable[object]]]:
    """An `async def` function, a partial of one (`iscoroutinefunction` sees through
    partials), or an object with `async def __call__`."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (an instance's async __call__)
    )


def runs_on_event_loop(handlers: Mapping[str, Handler]) -> bool:
    """Whether a registry needs an event loop: it holds at least one `async def` handler."""
    return any(is_async_handler(fn) for fn in handlers.values())


async def async_outcome_of(
    handlers: Mapping[str, Handler],
    lease: AsyncLease,
    pool: Executor,
    *,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> Returned | Raised:
    """Run the handler of the lease's kind, an `async def` one on this loop (in this
    task, with `current_lease()` set), a sync one on `pool` (with the same context)."""
    handler = handlers.get(lease.job.kind)
    if handler is None:  # the registry changed after the claim: it asked for known kinds
        known = ", ".join(sorted(handlers)) or "none"
        return Raised(f"no handler for kind {lease.job.kind!r} (this registry knows: {known})")
    if not is_async_handler(handler):
        context = contextvars.copy_context()
        call = functools.partial(outcome_of, handler, lease, max_result_bytes=max_result_bytes)
        return await asyncio.get_running_loop().run_in_executor(pool, context.run, call)
    try:
        with handler_span(lease.job):
            token = set_current_lease(lease)
            try:
                returned: Any = await handler(lease.job)
            finally:
                token.var.reset(token)
            done = completion_of(returned, max_result_bytes=max_result_bytes)
    except Exception as exc:
        return Raised.from_exception(exc)
    return Returned(done.effect, done.result)


async def wait_for(event: asyncio.Event, timeout: float) -> bool:
    """`threading.Event.wait(timeout)` for an `asyncio.Event`: True once set."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:  # TimeoutError itself from 3.11 on
        return event.is_set()
    return True
