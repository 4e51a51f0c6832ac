"""The async queue: the plans of `queuecore.core.operations`, awaited.

`connect_async()` opens one. Every operation of `Queue` is a coroutine here with the same
name, arguments, answer and errors, on the same table: the rules live in `Operations`,
which this class shares with the sync `SQLQueue`; only the sending differs. Each backend
supplies an `AsyncDriver`: its AsyncEngine (SQLAlchemy's asyncio extension) for
transactions, and a hot path of its own for the one-round-trip operations.

Effects (R10) may be `async def f(conn)`, awaited with the completing transaction's
`AsyncConnection`, or plain `def f(conn)` as for the sync queue: those run through
`AsyncConnection.run_sync`, so they get a `Connection` on the same transaction, and its
I/O still yields to the event loop (SQLAlchemy's greenlet bridge).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from queuecore.contract import AsyncDriver, AsyncListener
from queuecore.core.operations import OptionsView
from queuecore.core.plans import (
    INVALIDATED,
    A,
    CallEffect,
    Hot,
    Plan,
    Program,
    Ready,
    Run,
    RunCompiled,
    Savepoint,
    Tx,
)
from queuecore.executors.hotpath import execute_on_connection
from queuecore.executors.reconnect import Outage, async_transaction, reconnecting, translating
from queuecore.executors.waiting import wait_until_finished_async
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo


class AsyncSQLQueue(OptionsView):
    """A durable job queue for asyncio code. Use `queuecore.connect_async()` to get one."""

    def __init__(self, driver: AsyncDriver) -> None:
        self.driver = driver
        self.engine = driver.engine
        self.backend = driver.backend
        self.ops = driver.ops
        self._read_engine = self.engine.execution_options(queuecore_read_only=True)
        self._outage = Outage()  # for `reconnecting`: each outage logged once, not per retry

    # --- running plans ----------------------------------------------------------------

    async def _run(self, plan: Plan[A]) -> A:
        if type(plan) is Hot:
            while True:
                answer = plan.finish(await self.driver.execute(plan.steps))
                if type(answer) is not Hot:
                    return answer
                plan = answer
        if type(plan) is Tx:
            return await self._transact(plan)
        if type(plan) is Ready:
            return plan.value
        sent = None  # a generator of plans: one transaction after another
        while True:
            try:
                step = plan.send(sent)
            except StopIteration as done:
                value: A = done.value  # the generator's return value, typed Any by Python
                return value
            sent = await self._run(step)

    async def _transact(self, tx: Tx[A]) -> A:
        if tx.conn is not None:
            if not isinstance(tx.conn, AsyncConnection):
                raise TypeError(
                    f"the async queue joins an AsyncConnection's transaction, got {tx.conn!r}"
                )
            self.backend.check_callers_connection(tx.conn)
            return await _drive(tx.conn, tx.body)
        if not tx.calls_back:
            answer = await self.driver.run_blocking(tx)
            if answer is not NotImplemented:
                return answer
        async with async_transaction(self.engine if tx.write else self._read_engine) as conn:
            return await _drive(conn, tx.body)

    # --- the operations (`Queue`'s, awaited) -------------------------------------------

    @reconnecting(after_commit=lambda kwargs: kwargs.get("dedupe_key") is not None)
    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        queue: str = "default",
        delay: float = 0,
        run_at: datetime | float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        conn: AsyncConnection | None = None,
    ) -> EnqueueResult:
        plan = self.ops.enqueue(
            kind,
            payload,
            queue=queue,
            delay=delay,
            run_at=run_at,
            priority=priority,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            conn=conn,
        )
        return await self._run(plan)

    @reconnecting(after_commit=False)
    async def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> list[int]:
        plan = self.ops.enqueue_many(
            kind, payloads, queue=queue, priority=priority, max_attempts=max_attempts, conn=conn
        )
        return await self._run(plan)

    @reconnecting(after_commit=True)
    async def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]:
        return await self._run(self.ops.claim(worker, limit=limit, queues=queues, kinds=kinds))

    @reconnecting(after_commit=True)
    async def complete(self, job: Job, *, effect: Any = None, result: Any = None) -> bool:
        return await self._run(self.ops.complete(job, effect=effect, result=result))

    @reconnecting(after_commit=True)
    async def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Any] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions:
        return await self._run(self.ops.complete_many(jobs, effects=effects, results=results))

    @reconnecting(after_commit=True)
    async def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None:
        return await self._run(self.ops.fail(job, error, retry_in=retry_in, permanent=permanent))

    @reconnecting(after_commit=True)
    async def heartbeat(self, job: Job) -> bool:
        return await self._run(self.ops.heartbeat(job))

    @reconnecting(after_commit=True)
    async def release(self, job: Job) -> bool:
        return await self._run(self.ops.release(job))

    @reconnecting(after_commit=True)
    async def held(self, jobs: Sequence[Job]) -> list[bool]:
        """`Queue.held`, awaited; the same arguments, answer and errors."""
        return await self._run(self.ops.held(jobs))

    @reconnecting(after_commit=True)
    async def mark_started(self, jobs: Sequence[Job]) -> int:
        """`Queue.mark_started`, awaited."""
        return await self._run(self.ops.mark_started(jobs))

    @reconnecting(after_commit=True)
    async def cancel(self, job_id: int) -> bool:
        return await self._run(self.ops.cancel(job_id))

    async def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26, awaited: on PostgreSQL a NOTIFY on an async connection wakes the waiter."""
        job_id, timeout = self.ops.wait_arguments(job_id, timeout)
        return await wait_until_finished_async(
            lambda: self.get(job_id),
            lambda: self.driver.finish_signal(job_id),
            timeout=timeout,
            pause_cap=self.backend.wait_pause_cap,
        )

    @reconnecting(after_commit=False)
    async def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]:
        return await self._run(self.ops.requeue_dead(ids))

    @reconnecting(after_commit=True)
    async def stats(self, queue: str | None = None) -> dict[str, Any]:
        return await self._run(self.ops.stats(queue))

    @translating
    async def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int:
        return await self._run(self.ops.purge(older_than=older_than, states=states, batch=batch))

    @reconnecting(after_commit=True)
    async def now(self) -> float:
        return await self._run(self.ops.now())

    @reconnecting(after_commit=True)
    async def get(self, job_id: int) -> JobSnapshot | None:
        return await self._run(self.ops.get(job_id))

    @reconnecting(after_commit=True)
    async def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        plan = self.ops.list_jobs(state, kind, queue, after_id, limit)
        return await self._run(plan)

    @reconnecting(after_commit=True)
    async def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        return await self._run(self.ops.report_worker(name, record))

    @reconnecting(after_commit=True)
    async def forget_worker(self, name: str) -> None:
        return await self._run(self.ops.forget_worker(name))

    @reconnecting(after_commit=True)
    async def workers(self) -> list[WorkerInfo]:
        return await self._run(self.ops.workers())

    @reconnecting(after_commit=True)
    async def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        return await self._run(self.ops.dead_jobs(queue, limit=limit))

    async def listen(self) -> AsyncListener | None:
        """An async connection that hears of new jobs, for idle workers; None: poll."""
        return await self.driver.listen()

    async def close(self) -> None:
        await self.driver.close()

    async def __aenter__(self) -> AsyncSQLQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _drive(conn: AsyncConnection, body: Program[A]) -> A:
    """`sqlqueue._drive`, awaited; effects as the module docstring says."""
    answer: Any = None
    error: Exception | None = None
    savepoint = None
    while True:
        try:
            request = body.send(answer) if error is None else body.throw(error)
        except StopIteration as done:
            value: A = done.value  # the program's return value, typed Any by Python
            return value
        answer = error = None
        try:
            if type(request) is Run:
                answer = await conn.execute(request.statement, request.params)
            elif type(request) is RunCompiled:
                (answer,) = await conn.run_sync(execute_on_connection, (request,))
            elif type(request) is CallEffect:
                await _call_effect(conn, request.effect)
            elif request is Savepoint.BEGIN:
                savepoint = await conn.begin_nested()
            elif request is Savepoint.ROLLBACK:
                await savepoint.rollback()  # type: ignore[union-attr]
            elif request is Savepoint.COMMIT:
                await savepoint.commit()  # type: ignore[union-attr]
            elif request is INVALIDATED:
                answer = conn.invalidated
            else:
                raise TypeError(f"not a transaction request: {request!r}")
        except Exception as exc:
            error = exc


async def _call_effect(conn: AsyncConnection, effect: Any) -> None:
    if inspect.iscoroutinefunction(effect):
        await effect(conn)
        return
    returned = await conn.run_sync(effect)
    if inspect.isawaitable(returned):
        if inspect.iscoroutine(returned):
            returned.close()
        raise TypeError(
            f"the effect {effect!r} returned an awaitable: declare it `async def` so that it "
            "is awaited with the AsyncConnection (a plain function gets a sync Connection)"
        )
