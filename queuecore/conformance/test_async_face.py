"""What only the async face has: `async def` effects awaited with the AsyncConnection,
`conn=` that must be an AsyncConnection, LISTEN on an async connection, `async with`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

import queuecore
from queuecore.sql.schema import jobs


def run(dsn: str, scenario: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        async with queuecore.connect_async(dsn) as queue:
            assert isinstance(queue, queuecore.AsyncQueue)
            await scenario(queue)

    asyncio.run(main())


def test_an_async_effect_commits_with_the_completion_and_a_failing_one_with_nothing(dsn, db):
    async def scenario(queue: Any) -> None:
        first, second = await queue.enqueue_many("k", [{"n": 1}, {"n": 2}])
        a, b = await queue.claim("w", limit=2)

        async def note(conn: AsyncConnection) -> None:
            assert isinstance(conn, AsyncConnection)
            await conn.execute(sa.update(jobs).where(jobs.c.id == b.id).values(priority=7))

        async def boom(conn: AsyncConnection) -> None:
            await conn.execute(sa.update(jobs).where(jobs.c.id == b.id).values(priority=9))
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await queue.complete(a, effect=boom)
        assert (await queue.get(a.id)).state == "running"
        assert await queue.complete(a, effect=note)
        outcome = await queue.complete_many([b], effects=[boom])
        assert list(outcome) == [False] and isinstance(outcome.errors[0], RuntimeError)
        assert [(await queue.get(i)).state for i in (first, second)] == ["done", "running"]
        assert (await queue.get(second)).priority == 7  # boom's 9 rolled back, note's 7 kept

    run(dsn, scenario)


def test_a_plain_effect_that_returns_an_awaitable_is_refused(dsn):
    async def later(conn: Any) -> None:
        return None

    async def scenario(queue: Any) -> None:
        await queue.enqueue("k", {})
        [job] = await queue.claim("w")
        with pytest.raises(TypeError, match="async def"):
            await queue.complete(job, effect=lambda conn: later(conn))
        assert (await queue.get(job.id)).state == "running"

    run(dsn, scenario)


def test_conn_must_be_an_async_connection(dsn, db):
    async def scenario(queue: Any) -> None:
        with db.connect() as conn, pytest.raises(TypeError, match="AsyncConnection"):
            await queue.enqueue("k", {}, conn=conn)

    run(dsn, scenario)


def test_listen_hears_an_enqueue_where_the_backend_can_listen_and_is_none_elsewhere(dsn, harness):
    async def scenario(queue: Any) -> None:
        listener = await queue.listen()
        if "listen" not in harness.capabilities:
            if listener is not None:  # behind a pooler: LISTEN runs, and hears nothing
                try:
                    assert not await listener.reaches_itself(1.0)
                finally:
                    await listener.close()
            return
        try:
            assert await listener.reaches_itself(5.0)
            await queue.enqueue("k", {}, queue="mail")
            assert await listener.wait(5.0) == ["mail"]
        finally:
            await listener.close()

    run(dsn, scenario)
