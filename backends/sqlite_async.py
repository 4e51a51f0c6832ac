"""SQLite for the async queue.

Transactions (effects, `conn=`, reads) go through SQLAlchemy's asyncio extension on
aiosqlite, whose connections run the queue's own SQLite library (`pick_driver`) on a
thread each, with the same BEGIN IMMEDIATE hook and busy handling as the sync engine.
The hot path is the sync queue's own (`HotPath`, SQLite's `run_on_driver` with its
`_Patience`) on one thread of its own: one hop per operation instead of one per
statement and fetch, and SQLite takes one writer at a time anyway. While a lock is held
elsewhere, the waiting happens on that thread; the event loop runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType, NotImplementedType
from typing import Any, cast

import aiosqlite
from sqlalchemy import URL
from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_dbapi
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from queuecore.contract import AsyncListener, AsyncOpener
from queuecore.core.operations import Operations
from queuecore.core.options import QueueOptions
from queuecore.core.plans import A, Outcome, Step, Tx
from queuecore.executors.hotpath import HotPath
from queuecore.executors.sqlqueue import run_transaction
from queuecore.executors.waiting import AsyncSleep
from queuecore.migrate import ensure_schema

from .sqlite import (
    SQLiteBackend,
    SQLiteModule,
    SQLiteOptions,
    SQLiteQueue,
    _Patience,
    begin_immediately,
)

#: Rows aiosqlite fetches per hop when a result is iterated.
CHUNK = 256


class SQLiteAsyncDriver:
    def __init__(
        self, engine: AsyncEngine, backend: SQLiteBackend, ops: Operations, hot: HotPath
    ) -> None:
        self.engine, self.backend, self.ops = engine, backend, ops
        self._hot = hot
        self._read_engine = hot.engine.execution_options(queuecore_read_only=True)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="queuecore-sqlite-hot")

    async def execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """On the hot path's thread. A cancelled caller does not stop what already runs
        there: a claim it made is leased to nobody and comes back when its lease ends,
        as a crashed worker's does."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._hot.execute, steps)

    async def run_blocking(self, tx: Tx[A]) -> A | NotImplementedType:
        """On the hot path's thread with the sync engine (its BEGIN IMMEDIATE hook and busy
        handling): a read or a write of the queue's own in one hop, not one per statement."""
        engine = self._hot.engine if tx.write else self._read_engine
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, run_transaction, engine, tx.body)

    def finish_signal(self, job_id: int) -> AsyncSleep:
        return AsyncSleep()

    async def listen(self) -> AsyncListener | None:
        return None

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._hot.close)  # on its own thread
        self._thread.shutdown(wait=True)
        await self.engine.dispose()
        await asyncio.to_thread(self._hot.engine.dispose)


async def open_sqlite(
    url: URL, queue: QueueOptions, options: SQLiteOptions, /, **pool: Any
) -> SQLiteAsyncDriver:
    busy_timeout = options.busy_timeout
    sync_url = url.set(drivername="sqlite")
    sync_engine = SQLiteQueue.create_engine(sync_url, options, **pool)  # checks the url
    # The module the engine loaded, as `SQLiteQueue.create_engine` picked it.
    dbapi = cast(SQLiteModule, sync_engine.dialect.loaded_dbapi)
    patience = _Patience(str(url.database), busy_timeout, dbapi)
    backend = SQLiteBackend(
        sync_engine.dialect,
        busy_timeout=busy_timeout,
        synchronous=options.synchronous,
        patience=patience,
    )
    ops = Operations(backend, queue)  # checks every option before anything is written
    path = str(url.database)

    async def connect() -> aiosqlite.Connection:
        # aiosqlite's thread runs the queue's SQLite library, never a second one.
        return await aiosqlite.Connection(lambda: dbapi.connect(path, timeout=busy_timeout), CHUNK)

    engine = create_async_engine(
        url.set(drivername="sqlite+aiosqlite"),
        module=AsyncAdapt_aiosqlite_dbapi(aiosqlite, cast(ModuleType, dbapi)),
        async_creator=connect,
        # A pool of file connections on every SQLAlchemy we support: 2.1 pools them by
        # default, 2.0.30 (the lowest) used NullPool, which refuses the pool options.
        poolclass=AsyncAdaptedQueuePool,
        **pool,
    ).execution_options(queuecore_sqlite=True)
    begin_immediately(engine.sync_engine, busy_timeout, options.synchronous, patience)
    await asyncio.to_thread(ensure_schema, sync_engine, migrate=backend.migrates_on_connect)
    return SQLiteAsyncDriver(engine, backend, ops, HotPath(sync_engine, backend))


#: Checked by mypy: what the async_drivers entry point names keeps the contract.
_AS_REGISTERED: AsyncOpener = open_sqlite
