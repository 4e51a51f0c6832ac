"""Pick the backend from the DSN's dialect. Backends are found through entry points
(group `queuecore.backends`), so a third-party one plugs in the same way ours do."""

from __future__ import annotations

import functools
from collections.abc import Coroutine, Generator
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from sqlalchemy import URL, Engine

from queuecore.core import options as option_set
from queuecore.core.dsn import to_url
from queuecore.errors import UnknownBackendError
from queuecore.protocol import AsyncQueue, BackendClass, Queue

ENTRY_POINT_GROUP = "queuecore.backends"

__all__ = [
    "ENTRY_POINT_GROUP",
    "backend_for",
    "connect",
    "connect_async",
    "sqlite_engine",
    "to_url",
]


@functools.cache
def _registered() -> tuple[EntryPoint, ...]:
    """The group's entry points, read once per process: reading them opens every
    installed distribution's metadata, which cost more than half of a `connect()`
    (about 14 ms a read, several reads a connect, on a venv of 100 packages)."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def backend_for(url: URL) -> BackendClass:
    """The backend class registered for the URL's dialect."""
    name = url.get_backend_name()
    found = [ep for ep in _registered() if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in _registered())
        raise UnknownBackendError(
            f"no queuecore backend for the dialect {name!r}; installed backends: {known}"
        )
    backend: BackendClass = found[0].load()
    return backend


@functools.cache
def installed_backends() -> tuple[BackendClass, ...]:
    """Every backend that loads, so one's own options are known (and ignored) by the
    others; found once per process."""
    loaded: list[BackendClass] = []
    for ep in _registered():
        try:
            loaded.append(ep.load())
        except ImportError:  # a broken third-party backend must not break the others
            continue
    return tuple(loaded)


def connect(bind: str | URL | Engine, **options: Any) -> Queue:
    """Open a queue. Every backend takes the same options (ADR 0009): lease_seconds,
    max_attempts, backoff_base, backoff_cap, clock, rng, max_payload_bytes,
    max_result_bytes; the pool's pool_size, max_overflow, pool_timeout, pool_recycle,
    pool_pre_ping, echo; and the backend-only synchronous, busy_timeout, sqlite_driver
    (SQLite) and notify (PostgreSQL), which the other backend ignores. An Engine passed in
    is used, never disposed."""
    url = to_url(bind)
    backend = backend_for(url)
    accepted = option_set.sort(backend, installed_backends(), bind, options)
    return backend(bind if isinstance(bind, Engine) else url, **accepted)


def sqlite_engine(url: str | URL, *, sqlite_driver: str | None = None, **options: Any) -> Engine:
    """An SQLAlchemy engine for your application's own SQLite database, built on the same
    SQLite library the queue uses, so that your transactions can enqueue jobs.

    Use it where you would call `sqlalchemy.create_engine("sqlite:///app.db")`::

        engine = queuecore.sqlite_engine("sqlite:///app.db")
        queue = queuecore.connect(engine)
        with engine.begin() as conn:
            conn.execute(...)  # your rows
            queue.enqueue("send_receipt", {"order": 42}, conn=conn)  # committed with them

    queuecore prefers the SQLite of the `pysqlite3` wheel, when it is installed, to the
    one Python was built with (the wheel's has a fix the queue needs). Two SQLite
    libraries must never open one file in one process, so an engine from plain
    `create_engine` is refused by `enqueue(conn=...)` then; this one is not.

    Args:
        url: an SQLite URL, such as `sqlite:///app.db`.
        sqlite_driver: the DB-API module to use, `sqlite3` or `pysqlite3` (default: the
            queue's own choice, as `connect()` makes it).
        **options: passed on to `sqlalchemy.create_engine` (echo, pool options, ...).

    Raises:
        ValueError: the URL is not an SQLite one.
        ModuleNotFoundError: the named `sqlite_driver` is not installed.
    """
    from queuecore.backends.sqlite import application_engine

    engine: Engine = application_engine(url, sqlite_driver=sqlite_driver, **options)
    return engine


def connect_async(bind: str | URL, **options: Any) -> Opening:
    """Open a queue for asyncio code: the same options as `connect()` (ADR 0009), every
    operation awaited. PostgreSQL runs on psycopg 3's async connection, SQLite on
    aiosqlite, MariaDB on mysqlclient in threads and asyncmy for effects; each needs
    `pip install 'queuecore[async]'` beside its own extra. `queue = await
    connect_async(...)`, or `async with connect_async(...) as queue:` to close it at the
    end of the block."""
    return Opening(_open_async(bind, **options))


class Opening:
    """An async queue being opened: awaitable (the queue), and an async context manager
    (the queue, closed on the way out), as aiosqlite's and asyncpg's connects are."""

    def __init__(self, opening: Coroutine[Any, Any, AsyncQueue]) -> None:
        self._opening = opening
        self._queue: AsyncQueue | None = None

    def __await__(self) -> Generator[Any, None, AsyncQueue]:
        return self._opening.__await__()

    async def __aenter__(self) -> AsyncQueue:
        self._queue = await self._opening
        return self._queue

    async def __aexit__(self, *exc: object) -> None:
        if self._queue is not None:
            await self._queue.close()


async def _open_async(bind: str | URL, **options: Any) -> AsyncQueue:
    from queuecore.executors.asyncqueue import AsyncSQLQueue
    from queuecore.executors.sqlqueue import SQLQueue

    url = to_url(bind)
    backend = backend_for(url)
    accepted = option_set.sort(backend, installed_backends(), bind, options)
    own = option_set.queue_options(SQLQueue)
    ops_options = {name: accepted.pop(name) for name in list(accepted) if name in own}
    try:
        driver = await backend.open_async(url, ops_options, **accepted)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc}; the async queue needs its extra: pip install 'queuecore[async]'"
        ) from exc
    return AsyncSQLQueue(driver)
