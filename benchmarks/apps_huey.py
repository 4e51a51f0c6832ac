"""The huey instance `huey_consumer` runs in the worker benchmark: huey's SQLite storage
with synchronous=NORMAL (queuecore's default; huey's own is FULL), one no-op task."""

from __future__ import annotations

import huey as _huey  # noqa: F401  (imported before the gate, as the others are)

from benchmarks.gate import dsn, wait_at_gate
from benchmarks.implementations import huey_app

wait_at_gate()
huey, noop = huey_app(dsn(), "NORMAL")
