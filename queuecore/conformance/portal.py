"""A blocking portal: the conformance tests, written against the sync `Queue`, drive a real
`AsyncQueue` through it. An event loop runs on a thread of its own; each coroutine of the
queue runs there to completion while the test waits (as anyio's BlockingPortal does).
Nothing is faked: the statements, transactions and effects are the async queue's own;
only the test's waiting blocks.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncTransaction

T = TypeVar("T")


class Portal:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="portal", daemon=True)
        self._thread.start()

    def call(self, function: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> T:
        """Await `function(*args, **kw)` on the portal's loop (a coroutine, or any
        awaitable such as `AsyncConnection.begin()`'s) and return its answer here."""

        async def run() -> T:
            return await function(*args, **kw)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BlockingQueue:
    """The sync face of an AsyncQueue: each coroutine method runs on the portal; a
    `conn=` from `queue.engine` is handed over as the AsyncConnection it wraps."""

    def __init__(self, queue: Any, portal: Portal) -> None:
        self._queue, self._portal = queue, portal

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._queue, name)
        if not inspect.iscoroutinefunction(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if isinstance(kwargs.get("conn"), BlockingConnection):
                kwargs["conn"] = kwargs["conn"].async_connection
            return self._portal.call(value, *args, **kwargs)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        """A test that swaps a method for a sync spy swaps the async queue's: the spy runs
        off the loop (it calls back through the portal), awaited where the queue calls it."""
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        elif callable(value) and not inspect.iscoroutinefunction(value):

            async def off_the_loop(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.to_thread(value, *args, **kwargs)

            setattr(self._queue, name, off_the_loop)
        else:
            setattr(self._queue, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._queue, name)

    @property
    def engine(self) -> BlockingEngine:
        return BlockingEngine(self._queue.engine, self._portal)

    @property
    def hot(self) -> BlockingHotPath:
        return BlockingHotPath(self._queue.driver, self._portal)

    def __enter__(self) -> BlockingQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingEngine:
    def __init__(self, engine: AsyncEngine, portal: Portal) -> None:
        self._engine, self._portal = engine, portal

    @contextmanager
    def connect(self) -> Iterator[BlockingConnection]:
        conn = self._engine.connect()
        self._portal.call(conn.start)
        try:
            yield BlockingConnection(conn, self._portal)
        finally:
            self._portal.call(conn.close)

    @contextmanager
    def begin(self) -> Iterator[BlockingConnection]:
        with self.connect() as conn, conn.begin():
            yield conn


class BlockingConnection:
    def __init__(self, conn: AsyncConnection, portal: Portal) -> None:
        self.async_connection, self._portal = conn, portal

    def execute(self, statement: Any, params: Any = None) -> Any:
        return self._portal.call(self.async_connection.execute, statement, params)

    def exec_driver_sql(self, sql: str, params: Any = None) -> Any:
        return self._portal.call(self.async_connection.exec_driver_sql, sql, params)

    def begin(self) -> BlockingTransaction:
        return BlockingTransaction(self._portal.call(self.async_connection.begin), self._portal)


class BlockingTransaction:
    def __init__(self, transaction: AsyncTransaction, portal: Portal) -> None:
        self._transaction, self._portal = transaction, portal

    def commit(self) -> None:
        self._portal.call(self._transaction.commit)

    def rollback(self) -> None:
        self._portal.call(self._transaction.rollback)

    def __enter__(self) -> BlockingTransaction:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.rollback()


class BlockingHotPath:
    """`queue.hot.connection()` of the async PostgreSQL queue: its driver connection."""

    def __init__(self, driver: Any, portal: Portal) -> None:
        self._driver, self._portal = driver, portal

    def connection(self) -> tuple[None, BlockingDriverConnection]:
        return None, BlockingDriverConnection(self._driver._idle[-1], self._portal)


class BlockingDriverConnection:
    def __init__(self, conn: Any, portal: Portal) -> None:
        self._conn, self._portal = conn, portal

    def execute(self, sql: str) -> Any:
        async def run() -> Any:
            return _Rows(await (await self._conn.execute(sql)).fetchall())

        return self._portal.call(run)


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows
