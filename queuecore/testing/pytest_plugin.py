"""pytest fixtures for applications that use queuecore, loaded by pytest itself (the
`pytest11` entry point) once queuecore is installed: nothing to import or configure.

- `queuecore_clock`: a `queuecore.testing.FakeClock`, moved by the test;
- `queuecore_queue`: a fresh queue on a temporary SQLite file, on that clock, with the
  backoff's random source pinned to 1.0 so a retry's delay is its ceiling.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuecore.connect import connect
from queuecore.errors import SQLiteBuildWarning
from queuecore.protocol import Queue
from queuecore.testing import FakeClock


@pytest.fixture
def queuecore_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queuecore_queue(tmp_path: Path, queuecore_clock: FakeClock) -> Iterator[Queue]:
    with warnings.catch_warnings():
        # The WAL-reset bug needs two connections writing at one instant; a test's
        # throw-away file is the one place where it cannot matter.
        warnings.simplefilter("ignore", SQLiteBuildWarning)
        queue = connect(
            f"sqlite:///{tmp_path / 'queuecore-jobs.db'}",
            clock=queuecore_clock,
            rng=lambda: 1.0,
        )
    try:
        yield queue
    finally:
        queue.close()
