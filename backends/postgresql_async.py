"""PostgreSQL for the async queue: psycopg 3's AsyncConnection throughout.

Transactions go through SQLAlchemy's asyncio extension (`postgresql+psycopg`, which is
psycopg's async connection under an AsyncEngine). The hot path runs each operation's
compiled statements on driver connections taken out of the pool for good, in autocommit,
as the sync path does; a few of them, so that concurrent tasks do not queue behind one.
LISTEN for `wait()` and for idle workers runs on async connections of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from queuecore.contract import AsyncOpener
from queuecore.core.operations import Operations
from queuecore.core.options import QueueOptions
from queuecore.core.plans import A, DriverStep, Outcome, Step, Tx
from queuecore.executors.hotpath import execute_on_connection, lost_or_not
from queuecore.executors.reconnect import LOST, async_transaction
from queuecore.migrate import ensure_schema

from .postgresql import (
    CHANNEL,
    FINISHED_CHANNEL,
    NOTIFY,
    PostgresBackend,
    PostgresOptions,
    detached,
    engine_arguments,
)

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("queuecore")


class PostgresAsyncDriver:
    def __init__(self, engine: AsyncEngine, backend: PostgresBackend, ops: Operations) -> None:
        self.engine, self.backend, self.ops = engine, backend, ops
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._room = asyncio.Semaphore(max(1, getattr(engine.pool, "size", lambda: 5)()))
        self._finished = AsyncFinishedListener(engine)

    async def _driver_connection(self) -> psycopg.AsyncConnection[Any]:
        """A psycopg AsyncConnection out of the pool for good, in autocommit."""
        raw = await self.engine.raw_connection()
        conn: psycopg.AsyncConnection[Any] = detached(raw)
        await conn.set_autocommit(True)
        return conn

    async def execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """`HotPath.execute` on an async connection: the same errors, the same marks."""
        sync = self.engine.sync_engine
        if sync.dispatch.before_cursor_execute or sync.dispatch.after_cursor_execute:
            async with async_transaction(self.engine) as conn:
                return await conn.run_sync(execute_on_connection, steps)
        dialect = sync.dialect
        async with self._room:
            try:
                driver = self._idle.pop() if self._idle else await self._driver_connection()
            except dialect.loaded_dbapi.Error as error:
                unreachable = lost_or_not(error, dialect, lost=False)
                setattr(unreachable, LOST, "before commit")
                raise unreachable from error
            try:
                driver_steps = [(c.sql, c.parameters(params)) for c, params in steps]
                outcomes = await _run_steps(driver, driver_steps)
            except dialect.loaded_dbapi.Error as error:
                lost = bool(driver.closed) or dialect.is_disconnect(error, None, None)
                if lost:
                    with contextlib.suppress(Exception):
                        await driver.close()
                else:
                    self._idle.append(driver)
                raise lost_or_not(error, dialect, lost) from error
            self._idle.append(driver)
        return [
            (count, c.rows(rows, codes), codes)
            for (c, _), (count, rows, codes) in zip(steps, outcomes, strict=True)
        ]

    @contextlib.asynccontextmanager
    async def finish_signal(self, job_id: int) -> AsyncIterator[AsyncFinished]:
        """LISTEN first, then mark the job awaited, as the sync queue does."""
        async with self._finished.watching(job_id) as finished:
            async with self.engine.begin() as conn:
                await conn.execute(self.backend.stmt_mark_awaited, {"job_id": job_id})
            yield finished

    async def listen(self) -> AsyncNotifications:
        notifications = AsyncNotifications(self.engine, await self._driver_connection())
        await notifications.start()
        return notifications

    async def run_blocking(self, tx: Tx[A]) -> Any:
        # psycopg's AsyncConnection is the bridge: awaited throughout. Any, not the
        # protocol's `A | NotImplementedType`: typeshed derives NotImplemented's type
        # from Any, so returning it reads as returning Any.
        return NotImplemented

    async def close(self) -> None:
        await self._finished.close()
        while self._idle:
            with contextlib.suppress(Exception):
                await self._idle.pop().close()
        await self.engine.dispose()


async def _run_steps(conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
    if len(steps) == 1:
        return [await _run(conn, *steps[0])]
    async with conn.transaction():
        return [await _run(conn, sql, params) for sql, params in steps]


async def _run(conn: Any, sql: str, params: Any) -> Outcome:
    cursor = await conn.execute(sql, params)
    if cursor.description is None:
        return cursor.rowcount, [], ()
    rows = await cursor.fetchall()
    return cursor.rowcount, rows, tuple(c.type_code for c in cursor.description)


class AsyncNotifications:
    """`Notifications` on an async connection: LISTEN, the self-test, the wait."""

    def __init__(self, engine: AsyncEngine, conn: Any) -> None:
        self._engine, self._conn = engine, conn

    async def start(self) -> None:
        await self._conn.execute(f"LISTEN {CHANNEL}")

    async def reaches_itself(self, timeout: float) -> bool:
        """A NOTIFY sent through the pool, the way enqueue sends one, must come back here.
        Behind a transaction-mode pooler (PgBouncer) LISTEN is silently lost: it does not."""
        probe = f"probe:{secrets.token_hex(8)}"
        async with self._engine.begin() as conn:
            await conn.execute(NOTIFY, {"payload": probe})
        return any([n.payload == probe async for n in self._conn.notifies(timeout=timeout)])

    async def wait(self, timeout: float) -> list[str]:
        return [n.payload async for n in self._conn.notifies(timeout=timeout, stop_after=1)]

    async def close(self) -> None:
        await self._conn.close()


class AsyncFinished:
    """What one async `wait()` sleeps on: set when the trigger says its job finished."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.event.wait(), seconds)


class AsyncFinishedListener:
    """`FinishedListener` on the event loop: one LISTEN connection per queue, read by a
    task that wakes the waiters of each job. Started by the first waiter; when its
    connection fails the task ends, the waiters poll on, and the next waiter starts it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._waiters: dict[int, list[AsyncFinished]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def watching(self, job_id: int) -> AsyncIterator[AsyncFinished]:
        finished = AsyncFinished()
        self._waiters.setdefault(job_id, []).append(finished)
        try:
            async with self._lock:
                if self._reader is None or self._reader.done():
                    try:
                        self._reader = await self._start()  # LISTEN has run when this returns
                    except Exception as exc:  # the waiter polls; the next one tries again
                        log.warning("wait() cannot LISTEN (%s); polling", exc)
            yield finished
        finally:
            self._waiters[job_id].remove(finished)
            if not self._waiters[job_id]:
                del self._waiters[job_id]

    async def _start(self) -> asyncio.Task[None]:
        raw = await self._engine.raw_connection()
        conn: psycopg.AsyncConnection[Any] = detached(raw)
        await conn.set_autocommit(True)
        await conn.execute(f"LISTEN {FINISHED_CHANNEL}")
        return asyncio.create_task(self._read(conn), name="queuecore-wait")

    async def _read(self, conn: Any) -> None:
        try:
            async for note in conn.notifies():
                for finished in self._waiters.get(int(note.payload), ()):
                    finished.event.set()
        except Exception:  # a lost connection: waiters poll, the next one listens again
            pass
        finally:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def open_postgresql(
    url: URL, queue: QueueOptions, options: PostgresOptions, /, **pool: Any
) -> PostgresAsyncDriver:
    target, pool = engine_arguments(url, pool)
    engine = create_async_engine(target, **pool).execution_options(queuecore_postgresql=True)
    backend = PostgresBackend(engine.dialect, notify=options.notify)
    ops = Operations(backend, queue)  # checks every option before anything is written

    def check_schema() -> None:
        sync_engine = sa.create_engine(
            target, poolclass=NullPool, connect_args=pool.get("connect_args", {})
        )
        try:
            ensure_schema(sync_engine, migrate=backend.migrates_on_connect)
        finally:
            sync_engine.dispose()

    try:
        await asyncio.to_thread(check_schema)
    except BaseException:
        await engine.dispose()
        raise
    return PostgresAsyncDriver(engine, backend, ops)


#: Checked by mypy: what the async_drivers entry point names keeps the contract.
_AS_REGISTERED: AsyncOpener = open_postgresql
