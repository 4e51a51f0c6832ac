"""The registries `queuecore worker` runs in the worker benchmark: one no-op kind, as a
sync handler, and as an `async def` one (run on the event loop of one handler process)."""

from __future__ import annotations

from benchmarks.gate import wait_at_gate

wait_at_gate()


def noop(job: object) -> None:
    """Does nothing: the benchmark measures the queue and its worker, not the work."""


REGISTRY = {"noop": noop}


async def async_noop(job: object) -> None:
    """Does nothing, on the event loop."""


ASYNC_REGISTRY = {"noop": async_noop}
