"""W6 for `AsyncWorker` on PostgreSQL: an enqueue wakes an idle worker through NOTIFY,
long before its poll interval would have; a LISTEN that cannot hear its own NOTIFY (as
behind PgBouncer) leaves the worker polling; a LISTEN connection that dies is replaced.

Real server, real connections throughout. No timing decides a test except "well under
the poll interval" (a 20 s deadline against a 30 s interval) and generous deadlines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from queuecore.backends.postgresql_async import AsyncNotifications

import queuecore
from queuecore import AsyncWorker
from tests.faults.helpers import PATIENCE

pytestmark = [pytest.mark.postgresql_only, pytest.mark.parametrize("backend", ["postgresql"])]

POLL_INTERVAL = 30.0
WELL_UNDER = 20.0  # polling alone would take POLL_INTERVAL to see the job
LISTENING = (  # the last statement a LISTEN connection ran is its LISTEN
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = current_database() AND query = 'LISTEN queuecore'"
)


async def until(condition: Callable[[], object], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up after {PATIENCE}s waiting until {what}")
        await asyncio.sleep(0.02)


def beside_a_worker(
    dsn: str,
    body: Callable[[queuecore.AsyncQueue, AsyncWorker, asyncio.Event], Coroutine[Any, Any, None]],
    *,
    poll_interval: float,
    prepare: Callable[[queuecore.AsyncQueue], None] = lambda queue: None,
) -> None:
    """Run `body` while an idle `AsyncWorker` with a `ping` handler (which sets the event
    it is given) runs on the same loop; then stop the worker and wait for it."""

    async def scenario() -> None:
        async with queuecore.connect_async(dsn) as queue:
            prepare(queue)
            pinged = asyncio.Event()

            async def ping(job: queuecore.Job) -> None:
                pinged.set()

            worker = AsyncWorker(queue, {"ping": ping}, poll_interval=poll_interval)
            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                await body(queue, worker, pinged)
            finally:
                await asyncio.sleep(0)  # run() has begun, so stop() finds it running
                worker.stop()
                await asyncio.wait_for(running, PATIENCE)

    asyncio.run(scenario())


def test_w6_an_idle_async_worker_is_woken_by_notify_well_before_its_poll_interval(dsn):
    async def body(queue: Any, worker: AsyncWorker, pinged: asyncio.Event) -> None:
        await until(lambda: worker.listening, "the worker's own NOTIFY came back")
        await asyncio.sleep(0.2)  # let the claimer settle into its 30 s wait
        await queue.enqueue("ping", {})
        await asyncio.wait_for(pinged.wait(), WELL_UNDER)  # TimeoutError: NOTIFY did not wake it

    beside_a_worker(dsn, body, poll_interval=POLL_INTERVAL)


def test_a_listen_that_cannot_hear_itself_leaves_the_async_worker_polling(dsn, caplog):
    """The listener's connection never ran LISTEN, which is what a transaction-mode pooler
    does to it: the self-test's NOTIFY does not come back, and the worker polls."""

    def deafen(queue: Any) -> None:
        conninfo = sa.make_url(dsn).set(drivername="postgresql").render_as_string(False)

        async def deaf_listener() -> AsyncNotifications:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            return AsyncNotifications(queue.engine, conn)  # LISTEN never sent

        queue.listen = deaf_listener

    async def body(queue: Any, worker: AsyncWorker, pinged: asyncio.Event) -> None:
        await until(lambda: "did not reach its own LISTEN" in caplog.text, "the self-test fails")
        await queue.enqueue("ping", {})
        await asyncio.wait_for(pinged.wait(), PATIENCE)  # found by polling
        assert not worker.listening

    with caplog.at_level(logging.INFO, logger="queuecore"):
        beside_a_worker(dsn, body, poll_interval=0.5, prepare=deafen)
    assert "listening for new jobs" not in caplog.text


def test_a_lost_listen_connection_is_replaced_and_polling_covers_the_gap(dsn, caplog):
    admin = sa.create_engine(dsn, isolation_level="AUTOCOMMIT")

    def listening_pids() -> set[int]:
        with admin.connect() as conn:
            return set(conn.execute(sa.text(LISTENING)).scalars())

    others = listening_pids()  # connections of earlier tests on this session's database

    async def body(queue: Any, worker: AsyncWorker, pinged: asyncio.Event) -> None:
        await until(lambda: worker.listening, "the worker listens")
        ours = await asyncio.to_thread(listening_pids) - others
        assert len(ours) == 1
        await asyncio.to_thread(_terminate, admin, ours.pop())
        await until(lambda: "the LISTEN connection failed" in caplog.text, "the loss is seen")
        await queue.enqueue("ping", {})  # while the LISTEN is gone: polling finds it
        await asyncio.wait_for(pinged.wait(), PATIENCE)
        await until(
            lambda: worker.listening and caplog.text.count("listening for new jobs") == 2,
            "the worker listens again, on a new connection",
        )

    try:
        with caplog.at_level(logging.INFO, logger="queuecore"):
            beside_a_worker(dsn, body, poll_interval=1.0)
    finally:
        admin.dispose()


def _terminate(admin: sa.Engine, pid: int) -> None:
    with admin.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
