"""The sync queue: a thin executor of `queuecore.core.operations`' plans.

Every rule of the contract lives in `Operations` (no I/O); this class sends what it plans,
on the hot path's own driver connection (`HotPath`) or in an SQLAlchemy transaction, and
runs each operation again after a lost connection where that is safe (`reconnecting`).
A backend subclasses `SQLQueue` for the engine, the id sequence and LISTEN, and names its
`Backend` (the statements that differ), which `AsyncQueue` shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, ClassVar, Literal

from sqlalchemy import URL, Connection, Engine, MetaData

from queuecore.contract import Backend, FinishSignal
from queuecore.core import options as option_set
from queuecore.core.operations import Operations, OptionsView
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
from queuecore.executors.hotpath import HotPath, execute_on_connection
from queuecore.executors.reconnect import Outage, reconnecting, transaction, translating
from queuecore.executors.waiting import Sleep, wait_until_finished
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo
from queuecore.migrate import DEFAULT_CHAIN, ensure_schema
from queuecore.protocol import Effect, Listener
from queuecore.sql.schema import metadata as schema_metadata

__all__ = ["SQLQueue"]


class SQLQueue(OptionsView):
    """A durable job queue on one SQLAlchemy engine. Use `queuecore.connect()` to get one."""

    #: The backend's statement-level hooks, shared with `AsyncQueue`.
    backend_class: ClassVar[type[Backend]] = Backend
    # What `BackendClass` declares (queuecore.contract), for a backend with none of its own.
    backend_options: ClassVar[type[Any]] = option_set.NoOptions
    migration_chain: ClassVar[str] = DEFAULT_CHAIN
    metadata: ClassVar[MetaData] = schema_metadata
    #: The backend-only options this queue was opened with (an instance of `backend_options`).
    settings: Any

    def __init__(self, bind: str | URL | Engine, **options: Any) -> None:
        """The options are `connect()`'s, already sorted (`queuecore.core.options`): the
        queue's own, this backend's, and the pool's."""
        given = option_set.split(type(self), options)
        self.settings = given.backend
        self.engine = self.create_engine(bind, given.backend, **given.pool)
        self._owns_engine = not isinstance(bind, Engine)  # a caller's engine is theirs to dispose
        self._outage = Outage()  # for `reconnecting`: each outage logged once, not per retry
        self._read_engine = self.engine.execution_options(queuecore_read_only=True)
        self.backend = self.make_backend()
        # Checks every option before anything is written.
        self.ops = Operations(self.backend, given.queue)
        ensure_schema(self.engine, migrate=self.backend.migrates_on_connect)
        self.hot = HotPath(self.engine, self.backend)

    # --- what a backend supplies -------------------------------------------------

    @classmethod
    def create_engine(cls, bind: str | URL | Engine, options: Any, **pool: Any) -> Engine:
        """An engine set up for this database (pragmas, transaction start, pool), with
        this backend's `options` (an instance of `backend_options`)."""
        raise NotImplementedError

    def make_backend(self) -> Backend:
        """This queue's `Backend`, with the backend options it was opened with."""
        return self.backend_class(self.engine.dialect)

    def listen(self) -> Listener | None:
        """A connection that hears of new jobs, for idle workers; None: poll instead."""
        return None

    def finish_signal(self, job_id: int) -> AbstractContextManager[FinishSignal]:
        """What `wait()` sleeps on between two looks at the job: here a plain sleep (it
        polls); a backend that can notify wakes it when the job finishes."""
        return Sleep()

    @classmethod
    def migrating(cls, engine: Engine) -> AbstractContextManager[object]:
        """Held from before the migrations' transaction on `engine` begins until after it
        ended, so that two processes migrating one database take turns, and the second
        sees what the first committed (SQLite: none, its BEGIN takes the write lock)."""
        return nullcontext()

    @classmethod
    def id_sequence(cls, conn: Connection) -> int:
        """The last job id the table has handed out (0 before the first), purged ones too."""
        raise NotImplementedError

    @classmethod
    def advance_id_sequence(cls, conn: Connection, at_least: int) -> None:
        """Make the next id the table hands out greater than `at_least` (never lower it)."""
        raise NotImplementedError

    # --- running plans ----------------------------------------------------------------

    def _run(self, plan: Plan[A]) -> A:
        if type(plan) is Hot:
            while True:
                answer = plan.finish(self.hot.execute(plan.steps))
                if type(answer) is not Hot:
                    return answer
                plan = answer
        if type(plan) is Tx:
            return self._transact(plan)
        if type(plan) is Ready:
            return plan.value
        sent = None  # a generator of plans: one transaction after another
        while True:
            try:
                step = plan.send(sent)
            except StopIteration as done:
                value: A = done.value  # the generator's return value, typed Any by Python
                return value
            sent = self._run(step)

    def _transact(self, tx: Tx[A]) -> A:
        if tx.conn is not None:
            self.backend.check_callers_connection(tx.conn)
            return _drive(tx.conn, tx.body)
        if tx.hot:
            return self.hot.run_program(tx.body, turn=tx.turn)
        return run_transaction(self.engine if tx.write else self._read_engine, tx.body)

    # --- the operations ---------------------------------------------------------------

    @reconnecting(after_commit=lambda kwargs: kwargs.get("dedupe_key") is not None)
    def enqueue(
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
        conn: Connection | None = None,
    ) -> EnqueueResult:
        return self._run(
            self.ops.enqueue(
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
        )

    @reconnecting(after_commit=False)
    def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: Connection | None = None,
    ) -> list[int]:
        plan = self.ops.enqueue_many(
            kind, payloads, queue=queue, priority=priority, max_attempts=max_attempts, conn=conn
        )
        return self._run(plan)

    @reconnecting(after_commit=True)
    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]:
        return self._run(self.ops.claim(worker, limit=limit, queues=queues, kinds=kinds))

    @reconnecting(after_commit=True)
    def complete(self, job: Job, *, effect: Effect | None = None, result: Any = None) -> bool:
        return self._run(self.ops.complete(job, effect=effect, result=result))

    @reconnecting(after_commit=True)
    def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions:
        return self._run(self.ops.complete_many(jobs, effects=effects, results=results))

    @reconnecting(after_commit=True)
    def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None:
        return self._run(self.ops.fail(job, error, retry_in=retry_in, permanent=permanent))

    @reconnecting(after_commit=True)
    def heartbeat(self, job: Job) -> bool:
        return self._run(self.ops.heartbeat(job))

    @reconnecting(after_commit=True)
    def release(self, job: Job) -> bool:
        return self._run(self.ops.release(job))

    @reconnecting(after_commit=True)
    def held(self, jobs: Sequence[Job]) -> list[bool]:
        """For workers: per job, whether its claim still holds it (a cancel or a lost
        lease says False). One read that writes nothing, made just before jobs claimed
        ahead are handed to their slots, so a cancelled one never starts (W9)."""
        return self._run(self.ops.held(jobs))

    @reconnecting(after_commit=True)
    def mark_started(self, jobs: Sequence[Job]) -> int:
        """For workers: these jobs' handlers have started (W9); how many were marked."""
        return self._run(self.ops.mark_started(jobs))

    @reconnecting(after_commit=True)
    def cancel(self, job_id: int) -> bool:
        return self._run(self.ops.cancel(job_id))

    def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26: the job's snapshot once it is done, dead or cancelled, or as it is when
        `timeout` seconds (real time) have passed; None for an unknown id."""
        job_id, timeout = self.ops.wait_arguments(job_id, timeout)
        return wait_until_finished(
            lambda: self.get(job_id),
            lambda: self.finish_signal(job_id),
            timeout=timeout,
            pause_cap=self.backend.wait_pause_cap,
        )

    @reconnecting(after_commit=False)
    def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]:
        return self._run(self.ops.requeue_dead(ids))

    @reconnecting(after_commit=True)
    def stats(self, queue: str | None = None) -> dict[str, Any]:
        return self._run(self.ops.stats(queue))

    @translating
    def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int:
        return self._run(self.ops.purge(older_than=older_than, states=states, batch=batch))

    @reconnecting(after_commit=True)
    def now(self) -> float:
        return self._run(self.ops.now())

    @reconnecting(after_commit=True)
    def get(self, job_id: int) -> JobSnapshot | None:
        return self._run(self.ops.get(job_id))

    @reconnecting(after_commit=True)
    def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[JobSnapshot]:
        plan = self.ops.list_jobs(state, kind, queue, after_id, limit)
        return self._run(plan)

    @reconnecting(after_commit=True)
    def report_worker(self, name: str, record: Mapping[str, Any]) -> None:
        return self._run(self.ops.report_worker(name, record))

    @reconnecting(after_commit=True)
    def forget_worker(self, name: str) -> None:
        return self._run(self.ops.forget_worker(name))

    @reconnecting(after_commit=True)
    def workers(self) -> list[WorkerInfo]:
        return self._run(self.ops.workers())

    @reconnecting(after_commit=True)
    def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        return self._run(self.ops.dead_jobs(queue, limit=limit))

    def close(self) -> None:
        self.hot.close()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> SQLQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_transaction(engine: Engine, body: Program[A]) -> A:
    """A transaction program in a transaction of its own on `engine`."""
    with transaction(engine) as conn:
        return _drive(conn, body)


def _drive(conn: Connection, body: Program[A]) -> A:
    """Answer a transaction program's requests on `conn`; an error a request raised is
    thrown into the program at its `yield` (it may handle it, as `complete_many` does)."""
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
                answer = conn.execute(request.statement, request.params)
            elif type(request) is RunCompiled:
                (answer,) = execute_on_connection(conn, (request,))
            elif type(request) is CallEffect:
                request.effect(conn)
            elif request is Savepoint.BEGIN:
                savepoint = conn.begin_nested()
            elif request is Savepoint.ROLLBACK:
                savepoint.rollback()  # type: ignore[union-attr]
            elif request is Savepoint.COMMIT:
                savepoint.commit()  # type: ignore[union-attr]
            elif request is INVALIDATED:
                answer = conn.invalidated
            else:
                raise TypeError(f"not a transaction request: {request!r}")
        except Exception as exc:
            error = exc
