"""The async queue never blocks its event loop: while another connection holds the
database's one write lock (SQLite's), or the row locks an operation needs (PostgreSQL,
MariaDB), an awaited enqueue, claim or complete waits, and a ticker on the same loop
ticks on meanwhile.

The lock is released by the event loop itself (`call_later`): an operation that blocked
the loop while waiting for the lock would keep the release from ever running. A timer
thread releases it after a long while, so such a failure is reported, not hung; the test
then sees that the loop did not release it. No wall-clock threshold decides anything.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.sql.schema import jobs

HOLD = 2.0  # how long the other connection keeps the lock (seconds)
FALLBACK = 8.0  # when the timer thread gives up on the loop and releases the lock itself


class Holder:
    """A transaction of another connection, released once, by the loop or by the timer."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn, self.released_by = conn, None
        self._lock = threading.Lock()

    def release(self, by: str) -> None:
        with self._lock:
            if self.released_by is None:
                self.released_by = by
                self.conn.commit()


async def ticking_through(
    holder: Holder, operation: Callable[[], Awaitable[Any]]
) -> tuple[Any, int]:
    """Run `operation` while a ticker sleeps 10 ms at a time on the same loop; the loop
    releases the holder's lock after HOLD seconds. The operation's answer, and how many
    ticks fell while it was awaited."""
    loop = asyncio.get_running_loop()
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks.append(loop.time())

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    loop.call_later(HOLD, holder.release, "loop")
    fallback = threading.Timer(FALLBACK, holder.release, ("timer",))
    fallback.start()
    try:
        start = loop.time()
        answer = await operation()
        end = loop.time()
    finally:
        fallback.cancel()
        stop.set()
        await ticking
    return answer, sum(1 for tick in ticks if start < tick < end)


def hold(db: sa.Engine, one_writer: bool, lock: Callable[[sa.Connection], None]) -> Holder:
    conn = db.connect()
    if one_writer:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock, from now on
    lock(conn)
    return Holder(conn)


def run(dsn: str, scenario: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        async with queuecore.connect_async(dsn, busy_timeout=FALLBACK * 2) as queue:
            await scenario(queue)

    asyncio.run(main())


def check(holder: Holder, ticked: int) -> None:
    holder.conn.close()
    assert holder.released_by == "loop", "the operation blocked the event loop"
    assert ticked > 0, "the ticker never ran while the operation waited"


def test_an_awaited_enqueue_claim_and_complete_leave_the_loop_running(dsn, harness, db):
    one_writer = "single_writer" in harness.capabilities
    if one_writer:
        row_lock: Callable[[sa.Connection], None] = lambda conn: None  # noqa: E731
    else:

        def row_lock(conn: sa.Connection) -> None:
            conn.exec_driver_sql("SELECT id FROM queuecore_jobs FOR UPDATE")

    async def scenario(queue: Any) -> None:
        job_id = (await queue.enqueue("k", {"n": 0})).id
        if not one_writer:
            # An uncommitted row with the same dedupe key makes the insert wait for it.
            def pending(conn: sa.Connection) -> None:
                conn.execute(
                    jobs.insert().values(
                        kind="k",
                        payload={},
                        queue="default",
                        priority=0,
                        state="queued",
                        attempts=0,
                        max_attempts=5,
                        visible_at=0,
                        created_at=0,
                        dedupe_key="d",
                    )
                )

            holder = hold(db, one_writer, pending)
            result, ticked = await ticking_through(
                holder, lambda: queue.enqueue("k", {}, dedupe_key="d")
            )
            assert result.created is False
        else:
            holder = hold(db, one_writer, row_lock)
            result, ticked = await ticking_through(holder, lambda: queue.enqueue("k", {"n": 1}))
            assert result.created is True
        check(holder, ticked)

        if one_writer:  # elsewhere a claim skips locked rows: it never waits
            holder = hold(db, one_writer, row_lock)
            claimed, ticked = await ticking_through(holder, lambda: queue.claim("w"))
            assert [job.id for job in claimed] == [job_id]
            check(holder, ticked)
        else:
            [claimed_job] = await queue.claim("w")
            claimed = [claimed_job]

        holder = hold(db, one_writer, row_lock)
        done, ticked = await ticking_through(holder, lambda: queue.complete(claimed[0]))
        assert done is True
        check(holder, ticked)

    run(dsn, scenario)


@pytest.mark.requires("single_writer")
def test_a_blocking_call_on_the_loop_is_caught(dsn, db):
    """The test's own check: the sync queue, called on the loop as a new user would, is
    reported as blocking it (the timer, not the loop, releases the lock)."""
    sync_queue = queuecore.connect(dsn, busy_timeout=FALLBACK * 2)

    async def blocking_enqueue() -> Any:
        return sync_queue.enqueue("k", {})

    async def scenario(_queue: Any) -> None:
        holder = hold(db, True, lambda conn: None)
        await ticking_through(holder, blocking_enqueue)
        with pytest.raises(AssertionError, match="blocked the event loop"):
            check(holder, 0)

    try:
        run(dsn, scenario)
    finally:
        sync_queue.close()
