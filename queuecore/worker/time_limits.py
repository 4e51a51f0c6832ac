"""When a worker stops a handler that it no longer waits for (W8, W9): at the handler's
time limit, or a cancel grace after its lease was lost (cancelled, or taken over).

A limit is a kind's own (`@REGISTRY.handler("kind", timeout=S)`) or the worker's default
(`--timeout`); a registry that is a plain dict has only the default. The grace
(`--cancel-grace`) starts when a slot first sees the lease's `lost` event set, whoever set
it (the heartbeat, or a notification of the cancel): the stop needs nothing else, so it
works with every way the worker hears of a loss.

What stopping means depends on where the handler runs: a handler process is killed (as a
crash would be, `queuecore.worker.processes.handler_slot`), an `async def` task is
cancelled and its loop process killed if it does not end
(`queuecore.worker.processes.loop_slot`), and an in-process handler is abandoned, its lease
marked lost (`queuecore.worker.slots`, `queuecore.worker.async_worker`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: How long a cancelled `async def` task may take to end before its loop process is
#: killed: a task that ignores its cancel keeps its slot no longer than this past the limit.
CANCEL_WAIT = 0.5


@dataclass(frozen=True)
class TimeLimits:
    """A worker's limits: `default` for kinds without their own, `per_kind` from the
    registry, and the `cancel_grace` after a lost lease (None for both: no limit)."""

    default: float | None = None
    per_kind: Mapping[str, float] | None = None
    cancel_grace: float | None = None

    def of(self, kind: str) -> float | None:
        """The time limit of a handler of `kind`, in seconds (None: none)."""
        if self.per_kind and kind in self.per_kind:
            return self.per_kind[kind]
        return self.default

    def clock(self, kind: str) -> StopClock | None:
        """A clock for one run of a handler of `kind`; None when nothing can stop it."""
        limit = self.of(kind)
        if limit is None and self.cancel_grace is None:
            return None
        return StopClock(limit, self.cancel_grace)


NO_LIMITS = TimeLimits()


def time_limits(
    handlers: Mapping[str, Any], timeout: float | None, cancel_grace: float | None
) -> TimeLimits:
    """The limits of a worker of `handlers`: a `queuecore.Registry` says its kinds' own."""
    per_kind = getattr(handlers, "timeouts", None)
    return TimeLimits(timeout, dict(per_kind) if per_kind else None, cancel_grace)


class StopClock:
    """One handler run's deadlines: `why_stop` says when to stop it, and why (the text
    its job fails with), given when it started and whether its lease is lost now."""

    __slots__ = ("grace", "limit", "lost_since")

    def __init__(self, limit: float | None, grace: float | None) -> None:
        self.limit = limit
        self.grace = grace
        self.lost_since: float | None = None

    def why_stop(self, started: float, lost: bool, now: float) -> str | None:
        if self.limit is not None and now - started >= self.limit:
            return timed_out(self.limit)
        if not lost or self.grace is None:
            return None
        if self.lost_since is None:
            self.lost_since = now
        if now - self.lost_since >= self.grace:
            return (
                f"still running {self.grace:g} s after its lease was lost (the job was "
                "cancelled, or its lease ran out): stopped after the cancel grace"
            )
        return None


def timed_out(limit: float) -> str:
    """The error of a job whose handler ran past its limit (W8 names the words)."""
    return f"timed out after {limit:g} s"
