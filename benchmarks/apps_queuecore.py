"""The registry `queuecore worker` runs in the worker benchmark: one no-op kind."""

from __future__ import annotations

from benchmarks.gate import wait_at_gate

wait_at_gate()


def noop(job: object) -> None:
    """Does nothing: the benchmark measures the queue and its worker, not the work."""


REGISTRY = {"noop": noop}
