"""The kit's fixtures, registered by `queuecore.conformance.plugin` for the backends a
run names: every conformance test runs on every one of them (`backend`), and every test
that opens a queue runs through both faces, the sync `Queue` and the `AsyncQueue`
(driven through a blocking portal, `portal.py`).

Each test gets an empty, migrated database from its backend's harness, a fake clock it
moves by hand (R20) and a random source pinned to 1.0 (R21), so a backoff delay equals
its ceiling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.harness import Harness
from queuecore.conformance.portal import BlockingQueue, Portal
from queuecore.conformance.session import HARNESSES, Harnesses

APIS = ("sync", "async")
START = 1_700_000_000.0


class FakeClock:
    """Epoch seconds that move only when a test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def harnesses(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harnesses]:
    """The run's harnesses, each started when a test first needs it."""
    running = request.config.stash[HARNESSES]
    running.open(lambda name: tmp_path_factory.mktemp(name))
    yield running
    running.stop()


@pytest.fixture
def backend() -> str:
    """The name of the test's harness: the plugin parametrizes it over the run's."""
    raise pytest.UsageError("the conformance plugin parametrizes `backend`; it was not loaded")


@pytest.fixture
def harness(backend: str, harnesses: Harnesses) -> Harness:
    """The test's backend, started."""
    return harnesses.started(backend)


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    """Which face opens the test's queues: `queuecore.connect` or `queuecore.connect_async`."""
    face: str = request.param
    return face


@pytest.fixture(scope="session")
def portal() -> Iterator[Portal]:
    running = Portal()
    yield running
    running.close()


@pytest.fixture
def connect(api: str, request: pytest.FixtureRequest) -> Callable[..., queuecore.Queue]:
    """`queuecore.connect`, or `connect_async` behind the portal: the same arguments."""
    if api == "sync":
        return queuecore.connect
    portal = request.getfixturevalue("portal")

    def connect_async(bind: Any, **options: Any) -> queuecore.Queue:
        # The blocking face of an AsyncQueue: a Queue but for its engine's type.
        opened = BlockingQueue(portal.call(queuecore.connect_async, bind, **options), portal)
        return cast(queuecore.Queue, opened)

    return connect_async


@pytest.fixture
def dsn(harness: Harness, tmp_path: Path) -> str:
    """A migrated database holding no jobs, private to this test."""
    return harness.fresh(tmp_path)


@pytest.fixture
def db(harness: Harness, dsn: str) -> Iterator[sa.Engine]:
    """A plain engine on the test's database, for reading rows behind the queue's back
    (the harness knows what that needs: on SQLite, the queue's own SQLite library)."""
    engine = harness.engine(dsn)
    yield engine
    engine.dispose()


@pytest.fixture
def app_table(db: sa.Engine) -> Iterator[sa.Table]:
    """A table of the application's own, beside the queue's, dropped after the test
    (a harness may reuse one database for every test)."""
    table = sa.Table(
        "app_ledger",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.BigInteger),
        sa.Column("note", sa.Text, nullable=False),
    )
    table.create(db)
    yield table
    table.drop(db)


@pytest.fixture
def empty_dsn(harness: Harness, tmp_path: Path) -> str:
    """A database that was never migrated."""
    return harness.unmigrated(tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queue(
    dsn: str, clock: FakeClock, connect: Callable[..., queuecore.Queue]
) -> Iterator[Callable[..., queuecore.Queue]]:
    """Opens queues on this test's database; the fake clock and rng = 1.0 unless overridden."""
    opened: list[queuecore.Queue] = []

    def make(**options: Any) -> queuecore.Queue:
        options.setdefault("clock", clock)
        options.setdefault("rng", lambda: 1.0)
        queue = connect(dsn, **options)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


@pytest.fixture
def queue(make_queue: Callable[..., queuecore.Queue]) -> queuecore.Queue:
    return make_queue()
