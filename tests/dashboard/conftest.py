"""Dashboard tests reuse the conformance fixtures: every test on both backends, its own
migrated database."""

from collections.abc import Callable

import pytest

import queuecore


@pytest.fixture
def connect() -> Callable[..., queuecore.Queue]:
    """The conformance `make_queue` opens its queues with this: here the sync queue only
    (the conformance suite alone runs on the async face too)."""
    return queuecore.connect
