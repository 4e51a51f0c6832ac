"""Fault tests reuse the conformance fixtures (backend, clock, databases), and add a
database private to one test: they kill processes, terminate connections and add
tables of their own, none of which may leak into another test."""

from __future__ import annotations

from pathlib import Path

import pytest

import queuecore
from queuecore.conformance.harness import Harness


@pytest.fixture
def private_dsn(harness: Harness, tmp_path: Path) -> str:
    """A migrated, empty database that no other test touches: one made for it."""
    url = harness.unmigrated(tmp_path)
    queuecore.migrate(url)
    return url
