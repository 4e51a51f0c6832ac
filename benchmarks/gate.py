"""A start line for whole worker processes, so that process start (interpreter, imports)
stays out of the measured time: each process says it is ready, then waits until the
harness opens the gate. Every implementation waits at the same point, before it
connects to its database, so connecting is inside the measured time for all alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

GATE = "QCBENCH_GATE"
#: The database the gated apps use (a SQLAlchemy URL; a file path for huey).
DSN = "QCBENCH_DSN"


def ready_file(gate: Path, pid: int) -> Path:
    return gate.with_name(f"{gate.name}.ready.{pid}")


def wait_at_gate() -> None:
    """Called by the gated apps at import (outside a benchmark run: returns at once)."""
    gate = os.environ.get(GATE)
    if not gate:
        return
    path = Path(gate)
    ready_file(path, os.getpid()).touch()
    while not path.exists():
        time.sleep(0.001)


def dsn() -> str:
    return os.environ[DSN]
