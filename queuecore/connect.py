"""`connect()` and `connect_async()`: the backend the DSN's dialect names
(`queuecore.contract.backend_for`), opened with the one option set (ADR 0009)."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any

from sqlalchemy import URL, Engine

from queuecore.contract import async_driver_for, backend_for, installed_backends
from queuecore.core import options as option_set
from queuecore.core.dsn import to_url
from queuecore.protocol import AsyncQueue, Queue

__all__ = [
    "connect",
    "connect_async",
    "sqlite_engine",
    "to_url",
]


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


def load_driver(bind: str) -> None:
    """Import the DSN's backend and its database driver now, in this process.

    `queuecore worker` calls it before it forks its fork server, so that server and every
    handler process forked from it start with the driver imported: a handler process
    that opens its connection (for a job's effects) or replaces one that died does not
    import it again (psycopg: about 40 ms of CPU). A DSN that names no installed backend
    or driver is left for `connect()` to report, in its place and in its words."""
    try:
        url = to_url(bind)
        backend = backend_for(url)
        backend.create_engine(url, backend.backend_options()).dispose()
    except Exception:  # connect() raises the same, with its message
        return


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

    url = to_url(bind)
    backend = backend_for(url)
    given = option_set.split(backend, option_set.sort(backend, installed_backends(), bind, options))
    try:
        driver = await async_driver_for(url)(url, given.queue, given.backend, **given.pool)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc}; the async queue needs its extra: pip install 'queuecore[async]'"
        ) from exc
    return AsyncSQLQueue(driver)
