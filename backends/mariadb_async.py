"""MariaDB for the async queue.

The queue's own statements (the hot path, and transactions that call no effect) run as
the sync queue runs them, on mysqlclient, in a pool of threads: the same code on the
same driver, and mysqlclient lets go of the GIL while it waits for the server, so the
event loop runs on. Effects (R10) and a caller's `conn=` need an `AsyncConnection`:
those go through SQLAlchemy's asyncio extension on asyncmy. One hop to a thread per
operation, where an async driver would await each statement and each fetch.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import NotImplementedType
from typing import Any

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from queuecore.contract import AsyncListener, AsyncOpener
from queuecore.core.operations import Operations
from queuecore.core.options import NoOptions, QueueOptions
from queuecore.core.plans import A, Outcome, Step, Tx
from queuecore.executors.hotpath import HotPath
from queuecore.executors.sqlqueue import run_transaction
from queuecore.executors.waiting import AsyncSleep
from queuecore.migrate import ensure_schema

from .mariadb import MariaDBBackend, MariaDBQueue, refuse_mysql, utc_sessions

#: The async drivers of SQLAlchemy's MariaDB dialect: never the sync side's.
ASYNC_DRIVERS = ("asyncmy", "aiomysql")
#: Threads for the queue's own statements when the pool's size is not given.
THREADS = 5


class MariaDBAsyncDriver:
    def __init__(
        self, engine: AsyncEngine, backend: MariaDBBackend, ops: Operations, hot: HotPath
    ) -> None:
        self.engine, self.backend, self.ops = engine, backend, ops
        self._hot = hot
        size = getattr(hot.engine.pool, "size", lambda: THREADS)()
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="queuecore-mariadb")

    async def execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """On a thread of the pool. A cancelled caller does not stop what already runs
        there: a claim it made is leased to nobody and comes back when its lease ends,
        as a crashed worker's does."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._hot.execute, steps)

    async def run_blocking(self, tx: Tx[A]) -> A | NotImplementedType:
        """On a thread of the pool, as `execute`: a program of compiled statements (the
        claim) on that thread's driver connection, any other in a transaction of the
        pool's."""
        loop = asyncio.get_running_loop()
        if tx.hot:
            program = functools.partial(self._hot.run_program, tx.body, turn=tx.turn)
            return await loop.run_in_executor(self._threads, program)
        return await loop.run_in_executor(self._threads, run_transaction, self._hot.engine, tx.body)

    def finish_signal(self, job_id: int) -> AsyncSleep:
        return AsyncSleep()  # no LISTEN: `wait()` polls

    async def listen(self) -> AsyncListener | None:
        return None

    async def close(self) -> None:
        await asyncio.to_thread(self._hot.close)
        self._threads.shutdown(wait=True)
        await self.engine.dispose()
        await asyncio.to_thread(self._hot.engine.dispose)


async def open_mariadb(
    url: URL, queue: QueueOptions, options: NoOptions, /, **pool: Any
) -> MariaDBAsyncDriver:
    backend_name, _, driver = url.drivername.partition("+")
    sync_url = url.set(drivername=backend_name) if driver in ASYNC_DRIVERS else url
    sync_engine = MariaDBQueue.create_engine(sync_url, options, **pool)
    backend = MariaDBBackend(sync_engine.dialect)
    ops = Operations(backend, queue)  # checks every option before anything is written
    async_url = sync_engine.url.set(drivername=f"{backend_name}+asyncmy")
    engine = create_async_engine(async_url, isolation_level="READ COMMITTED", **pool)
    utc_sessions(engine.sync_engine)
    try:
        await asyncio.to_thread(ensure_schema, sync_engine, migrate=backend.migrates_on_connect)
        refuse_mysql(sync_engine)
    except BaseException:
        await engine.dispose()
        await asyncio.to_thread(sync_engine.dispose)
        raise
    return MariaDBAsyncDriver(engine, backend, ops, HotPath(sync_engine, backend))


#: Checked by mypy: what the async_drivers entry point names keeps the contract.
_AS_REGISTERED: AsyncOpener = open_mariadb
