"""The one parametrized fixture: every conformance test runs on every backend, and every
test that opens a queue runs through both faces: the sync `Queue` and the `AsyncQueue`
(driven through a blocking portal, `portal.py`), four configurations in all.

Each test gets an empty, migrated database, a fake clock it moves by hand (R20) and a
random source pinned to 1.0 (R21), so a backoff delay equals its ceiling.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from queuecore.backends.sqlite import pick_driver

import queuecore
from queuecore.schema import jobs
from tests.conformance.portal import BlockingQueue, Portal

BACKENDS = ("sqlite", "postgresql")
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
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file, copied for each test (cheaper than migrating each time)."""
    path = tmp_path_factory.mktemp("template") / "jobs.db"
    queuecore.migrate(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_database(scratch_databases: Any) -> str:
    """One migrated database for the session; each test starts from an emptied table."""
    dsn = scratch_databases.create()
    queuecore.migrate(dsn)
    return dsn


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    """Which face opens the test's queues: `queuecore.connect` or `queuecore.connect_async`."""
    return request.param


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
        return BlockingQueue(portal.call(queuecore.connect_async, bind, **options), portal)

    return connect_async


@pytest.fixture
def dsn(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated database holding no jobs, private to this test."""
    if backend == "sqlite":
        path = tmp_path / "jobs.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("postgres_database")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {jobs.name} RESTART IDENTITY"))
    engine.dispose()
    return url


@pytest.fixture
def db(dsn: str) -> Iterator[sa.Engine]:
    """A plain engine on the test's database, for reading rows behind the queue's back;
    on SQLite on the queue's own SQLite library (one library per file and process)."""
    options = {"module": pick_driver(None)[1]} if dsn.startswith("sqlite") else {}
    engine = sa.create_engine(dsn, **options)
    yield engine
    engine.dispose()


@pytest.fixture
def app_table(db: sa.Engine) -> Iterator[sa.Table]:
    """A table of the application's own, beside the queue's, dropped after the test
    (the PostgreSQL database is shared by the session)."""
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
def empty_dsn(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database that was never migrated."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'never-migrated.db'}"
    return request.getfixturevalue("scratch_databases").create()


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
