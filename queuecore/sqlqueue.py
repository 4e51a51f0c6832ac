"""The queue itself, backend-neutral: every rule of the contract lives here once.

A backend subclasses `SQLQueue` and supplies only what truly differs between databases:
how the engine is set up, which INSERT construct knows ON CONFLICT, and whether the
database server's clock is the default (R20).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Literal, NamedTuple

from sqlalchemy import URL, Connection, Double, Engine, bindparam, exc, select
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from queuecore import statements, tracing, validate
from queuecore.backoff import Backoff
from queuecore.compiled import Compiled
from queuecore.errors import DedupeConflict
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, to_datetime
from queuecore.migrate import ensure_schema
from queuecore.protocol import Effect, Listener
from queuecore.reconnect import LOST, Outage, reconnecting, transaction
from queuecore.schema import CANCELLED, DEAD, DONE, jobs
from queuecore.waiting import FinishSignal, Sleep, wait_until_finished

ERROR_TEXT_LIMIT = 2000
PURGEABLE = {"done": DONE, "dead": DEAD, "cancelled": CANCELLED}

Clock = Callable[[], float]

#: One statement to run on the driver: its compiled form and its parameters.
Step = tuple[Compiled, Mapping[str, Any]]
#: What the driver gave back for one step: (rowcount, rows, the columns' type codes).
Outcome = tuple[int, list[tuple[Any, ...]], tuple[Any, ...]]
#: The driver's form of a step: SQL text and laid-out parameters.
DriverStep = tuple[str, Any]

# Where the columns of `statements.JOB_COLUMNS` (then `state`, `ready_at`) sit in a claim's rows.
(
    ID,
    KIND,
    PAYLOAD,
    QUEUE,
    PRIORITY,
    ATTEMPTS,
    MAX_ATTEMPTS,
    VISIBLE_AT,
    TRACE_CONTEXT,
    STATE,
    READY_AT,
) = range(11)


class ClaimPlan(NamedTuple):
    """The statements of one claim shape, run in one transaction; the claimed rows come
    from the last. `order_step` says the step before it lists the ids in claim order."""

    steps: tuple[Compiled, ...]
    order_step: bool


class SQLQueue:
    """A durable job queue on one SQLAlchemy engine. Use `queuecore.connect()` to get one."""

    #: Run migrations at connect when the schema is missing (the embedded default).
    migrates_on_connect: ClassVar[bool] = False
    #: RETURNING may name a column of another FROM item (the claim's `ready_at`).
    returns_from_columns: ClassVar[bool] = False
    #: The longest pause between two looks of `wait()`: short where polling is all
    #: there is, longer where a notification wakes the waiter anyway.
    wait_pause_cap: ClassVar[float] = 0.5

    def __init__(
        self,
        bind: str | URL | Engine,
        *,
        lease_seconds: float = 30.0,
        max_attempts: int = 5,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        clock: Clock | None = None,
        rng: Callable[[], float] | None = None,
        max_payload_bytes: int = 1 << 20,
        max_result_bytes: int = 1 << 20,
        **engine_options: Any,
    ) -> None:
        self.lease_seconds = validate.positive_seconds("lease_seconds", lease_seconds)
        self.max_attempts = validate.at_least("max_attempts", max_attempts, 1, validate.INT32[1])
        self.max_payload_bytes = validate.at_least("max_payload_bytes", max_payload_bytes, 1)
        self.max_result_bytes = validate.at_least("max_result_bytes", max_result_bytes, 1)
        self.backoff = Backoff(
            base=validate.non_negative_seconds("backoff_base", backoff_base),
            cap=validate.non_negative_seconds("backoff_cap", backoff_cap),
            **({"rng": rng} if rng is not None else {}),
        )
        self.engine = self.create_engine(bind, **engine_options)
        self._owns_engine = not isinstance(bind, Engine)  # a caller's engine is theirs to dispose
        self._outage = Outage()  # for `reconnecting`: each outage logged once, not per retry
        self._local = threading.local()
        self._hot_connections: weakref.WeakSet[PoolProxiedConnection] = weakref.WeakSet()
        self._read_engine = self.engine.execution_options(queuecore_read_only=True)
        ensure_schema(self.engine, migrate=self.migrates_on_connect)

        server_now = self._server_now() if clock is None else None
        self._clock: Clock | None = None if server_now is not None else (clock or time.time)
        now = server_now if server_now is not None else bindparam("now", type_=Double)
        self._build_statements(now)

    # --- what a backend supplies -------------------------------------------------

    @classmethod
    def create_engine(cls, bind: str | URL | Engine, **options: Any) -> Engine:
        """An engine set up for this database (pragmas, transaction start, pool)."""
        raise NotImplementedError

    def _server_now(self) -> ColumnElement[float] | None:
        """The database server's clock as SQL, or None where the local clock is the default."""
        return None

    @staticmethod
    def _insert(table: Any) -> Any:
        """The dialect's INSERT construct (the one with `on_conflict_do_nothing`)."""
        raise NotImplementedError

    def _announcing(self, insert: Any) -> ClauseElement:
        """The hot path's INSERT with `_announce` folded into it, where the database can."""
        return insert

    def _announce(self, conn: Connection, queue: str) -> None:
        """Wake idle workers of `queue` when the enqueuing transaction commits (W6).
        Nothing to do where the database cannot notify: workers poll."""

    def listen(self) -> Listener | None:
        """A connection that hears of new jobs, for idle workers; None: poll instead."""
        return None

    def _finish_signal(self, job_id: int) -> AbstractContextManager[FinishSignal]:
        """What `wait()` sleeps on between two looks at the job: here a plain sleep (it
        polls); a backend that can notify wakes it when the job finishes."""
        return Sleep()

    def _run_on_driver(self, conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
        """Run the steps on the DBAPI connection: one step on its own (autocommit), several
        in one transaction that takes the write lock up front. Every row is fetched."""
        raise NotImplementedError

    @classmethod
    def id_sequence(cls, conn: Connection) -> int:
        """The last job id the table has handed out (0 before the first), purged ones too."""
        raise NotImplementedError

    @classmethod
    def advance_id_sequence(cls, conn: Connection, at_least: int) -> None:
        """Make the next id the table hands out greater than `at_least` (never lower it)."""
        raise NotImplementedError

    def _complete_fenced(self, batch: Sequence[Job]) -> list[bool]:
        """Fenced completes of many jobs in one transaction (no effects): one statement
        per job; a backend may do it in one."""
        steps = [(self._hot_complete, self._fence(job)) for job in batch]
        return [count == 1 for count, _, _ in self._execute(steps)]

    # --- set-up --------------------------------------------------------------------

    def _build_statements(self, now: ColumnElement[float]) -> None:
        s = statements
        self._now = now
        self._stmt_complete = s.complete(now)
        self._stmt_requeue_all = s.requeue_dead(now, by_id=False)
        self._stmt_requeue_ids = s.requeue_dead(now, by_id=True)
        self._stmt_live_counts = s.live_counts(now)
        self._stmt_dead_counts = s.dead_counts()
        self._stmt_get = s.get(now)
        self._stmt_dead_all = s.dead_jobs(now, by_queue=False)
        self._stmt_dead_in_queue = s.dead_jobs(now, by_queue=True)
        self._stmt_retire = s.retire(now)
        self._plans: dict[tuple[bool, int | None, int | None], ClaimPlan] = {}
        self._hot_complete = self._compile(self._stmt_complete)
        self._stmt_complete_result = s.complete_with_result(now)
        self._hot_complete_result = self._compile(self._stmt_complete_result)
        self._stmt_cancel = s.cancel(now)
        self._stmt_cancelled_counts = s.cancelled_counts()
        self._hot_fail_retry = self._compile(s.fail_retry(now))
        self._hot_fail_dead = self._compile(s.fail_dead(now))
        self._hot_heartbeat = self._compile(s.heartbeat(now))
        self._hot_release = self._compile(s.release(now))
        self._stmt_purge = {name: s.purge_batch(now, state) for name, state in PURGEABLE.items()}
        fresh = {"visible_at": now + bindparam("delay", type_=Double), "created_at": now}
        at = {"visible_at": bindparam("run_at", type_=Double), "created_at": now}
        self._stmt_enqueue_in = self._enqueue_statement(fresh)
        self._stmt_enqueue_at = self._enqueue_statement(at)
        self._stmt_enqueue_many = self._insert(jobs).values(**fresh)
        self._hot_enqueue_in = self._compile(self._announcing(s.enqueue_one(fresh)))
        self._hot_enqueue_at = self._compile(self._announcing(s.enqueue_one(at)))
        #: enqueue_many in one statement, where the backend has one (see `_announcing`).
        self._hot_enqueue_many: Compiled | None = None
        self._stmt_dedupe_lookup = select(jobs.c.id, jobs.c.kind, jobs.c.payload).where(
            jobs.c.dedupe_key == bindparam("dedupe_key")
        )

    def _enqueue_statement(self, times: Mapping[str, Any]) -> Any:
        return (
            self._insert(jobs)
            .values(**times)
            .on_conflict_do_nothing(index_elements=[jobs.c.dedupe_key])
            .returning(jobs.c.id)
        )

    def _params(self, **params: Any) -> dict[str, Any]:
        """Every statement's parameters; `now` is read once per statement from the clock."""
        if self._clock is not None:
            params["now"] = self._clock()
        return params

    def _compile(self, statement: ClauseElement) -> Compiled:
        return Compiled(statement, self.engine.dialect)

    def _hot_connection(self) -> tuple[PoolProxiedConnection, Any]:
        """This thread's own DBAPI connection for the hot path. A pool checkout and return
        per statement cost as much as SQLite's work, so each thread keeps one, detached
        from the pool so that many worker threads cannot starve it (enqueue, effects and
        stats still use the pool). It is dropped with its thread, or in a forked child."""
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == os.getpid():
            return held[1], held[2]
        raw = self.engine.raw_connection()
        raw.detach()
        driver = self.engine.dialect.get_driver_connection(raw.dbapi_connection)
        self._prepare_hot_connection(driver)
        self._local.held = (os.getpid(), raw, driver)
        self._hot_connections.add(raw)
        return raw, driver

    def _prepare_hot_connection(self, conn: Any) -> None:
        """Set up a driver connection that the hot path owns (e.g. its transaction mode)."""

    def _execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """The hot path: compiled statements on this thread's DBAPI connection. Driver
        errors still surface as SQLAlchemy's; a lost connection is closed, replaced on the
        next call, and marked for `reconnecting` as lost while committing (a statement in
        autocommit may have landed): every hot-path operation is safe to run again.

        SQLAlchemy's cursor events cannot fire on this path, so an engine that has
        listeners for them (tracing, logging, tests that watch the SQL) gets the same
        statements through its Connection instead, events and all."""
        if self._instrumented():
            return self._execute_on_engine(steps)
        dialect = self.engine.dialect
        try:
            raw, driver = self._hot_connection()
        except dialect.loaded_dbapi.Error as error:
            # Unlike engine.connect(), the pool hands on the driver's own error: wrapped, so
            # that `reconnecting` and the worker know a connection that could not be made.
            unreachable = exc.DBAPIError.instance(
                None, None, error, dialect.loaded_dbapi.Error, dialect=dialect
            )
            setattr(unreachable, LOST, "before commit")
            raise unreachable from error
        try:
            driver_steps = [(c.sql, c.parameters(params)) for c, params in steps]
            outcomes = self._run_on_driver(driver, driver_steps)
        except dialect.loaded_dbapi.Error as error:
            lost = dialect.is_disconnect(error, raw.dbapi_connection, None)
            if lost:
                self._local.held = None
                raw.invalidate(error)
            wrapped = exc.DBAPIError.instance(
                None,
                None,
                error,
                dialect.loaded_dbapi.Error,
                connection_invalidated=lost,
                dialect=dialect,
            )
            if lost:
                setattr(wrapped, LOST, "during commit")
            raise wrapped from error
        return [
            (count, c.rows(rows, codes), codes)
            for (c, _), (count, rows, codes) in zip(steps, outcomes, strict=True)
        ]

    def _instrumented(self) -> bool:
        dispatch = self.engine.dispatch
        return bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    def _execute_on_engine(self, steps: Sequence[Step]) -> list[Outcome]:
        """The hot path's statements through SQLAlchemy's Connection, in one transaction."""
        outcomes: list[Outcome] = []
        with self._write() as conn:
            for compiled, params in steps:
                result = conn.exec_driver_sql(compiled.sql, compiled.parameters(params))
                if not result.returns_rows:
                    outcomes.append((result.rowcount, [], ()))
                    continue
                codes = tuple(column[1] for column in result.cursor.description)
                rows = result.all()
                outcomes.append((len(rows), compiled.rows(rows, codes), codes))
        return outcomes

    def _claim_plan(
        self, one: bool, queue_count: int | None, kind_count: int | None = None
    ) -> ClaimPlan:
        """The claim's statements for this shape, compiled on first use."""
        plan = self._plans.get((one, queue_count, kind_count))
        if plan is not None:
            return plan
        now = self._now
        claim = (
            statements.claim_one(now, queue_count, kind_count)
            if one
            else statements.claim(
                now, queue_count, ready_at=self.returns_from_columns, kind_count=kind_count
            )
        )
        steps: list[ClauseElement] = []
        order_step = not one and not self.returns_from_columns
        if order_step:
            steps.append(statements.claim_order(now, queue_count, kind_count))
        steps.append(claim)
        plan = ClaimPlan(tuple(self._compile(step) for step in steps), order_step)
        self._plans[(one, queue_count, kind_count)] = plan
        return plan

    def _write(self) -> AbstractContextManager[Connection]:
        return transaction(self.engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return transaction(self._read_engine)

    # --- producing -------------------------------------------------------------------

    def _row(
        self,
        kind: str,
        payload: object,
        queue: str,
        priority: int,
        max_attempts: int | None,
    ) -> dict[str, Any]:
        return {
            "kind": validate.kind(kind),
            "payload": validate.payload(payload, max_bytes=self.max_payload_bytes),
            "queue": validate.queue_name(queue),
            "priority": validate.at_least("priority", priority, *validate.INT32),
            "state": "queued",
            "attempts": 0,
            "max_attempts": self.max_attempts
            if max_attempts is None
            else validate.at_least("max_attempts", max_attempts, 1, validate.INT32[1]),
            "trace_context": tracing.current_context(),  # None unless the caller traces
        }

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
        row = self._row(kind, payload, queue, priority, max_attempts)
        row["dedupe_key"] = validate.optional_text("dedupe_key", dedupe_key)
        if run_at is not None:
            if delay:
                raise ValueError("pass delay or run_at, not both")
            row["run_at"] = validate.epoch("run_at", run_at)
            stmt = self._stmt_enqueue_at
        else:
            row["delay"] = validate.non_negative_seconds("delay", delay)
            stmt = self._stmt_enqueue_in
        if conn is not None:
            return self._insert_deduplicated(conn, stmt, row)
        if row["dedupe_key"] is None:  # the web request's path: one compiled statement
            hot = self._hot_enqueue_in if run_at is None else self._hot_enqueue_at
            [(_, rows, _)] = self._execute([(hot, self._params(**row))])
            return EnqueueResult(id=rows[0][0], created=True)
        with self._write() as own:
            return self._insert_deduplicated(own, stmt, row)

    def _insert_deduplicated(
        self, conn: Connection, stmt: Any, row: dict[str, Any]
    ) -> EnqueueResult:
        # The existing row may be purged between the two statements: then insert again.
        while True:
            new_id = conn.execute(stmt, self._params(**row)).scalar()
            if new_id is not None:
                self._announce(conn, row["queue"])
                return EnqueueResult(id=new_id, created=True)
            existing = conn.execute(
                self._stmt_dedupe_lookup, {"dedupe_key": row["dedupe_key"]}
            ).first()
            if existing is not None:
                _same_work(row, existing)
                return EnqueueResult(id=existing.id, created=False)

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
        if isinstance(payloads, Mapping):
            raise TypeError("enqueue_many takes an iterable of payloads, not one payload")
        rows = [self._row(kind, p, queue, priority, max_attempts) for p in payloads]
        if not rows:
            return []
        now = self._params()
        if conn is None and self._hot_enqueue_many is not None:
            batch = {**rows[0], **now, "payloads": [row["payload"] for row in rows]}
            [(_, ids, _)] = self._execute([(self._hot_enqueue_many, batch)])
            return sorted(row[0] for row in ids)  # ids grow in the payloads' order
        params = [{**row, **now, "delay": 0.0, "dedupe_key": None} for row in rows]
        stmt = self._stmt_enqueue_many.returning(jobs.c.id, sort_by_parameter_order=True)
        if conn is not None:
            return self._insert_many(conn, stmt, params, queue)
        with self._write() as own:
            return self._insert_many(own, stmt, params, queue)

    def _insert_many(
        self, conn: Connection, stmt: Any, params: list[dict[str, Any]], queue: str
    ) -> list[int]:
        ids = list(conn.execute(stmt, params).scalars())
        self._announce(conn, queue)
        return ids

    # --- consuming --------------------------------------------------------------------

    @reconnecting(after_commit=True)
    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Job]:
        validate.text("worker", worker)
        limit = validate.at_least("limit", limit, 1)
        params = self._params(
            limit=limit,
            lease_seconds=self.lease_seconds,
            token=secrets.token_hex(16),
            claimant=worker,
        )
        queue_count = None
        if queues is not None:
            names = [queues] if isinstance(queues, str) else list(queues)
            if not names:
                raise ValueError("queues must name at least one queue, or be None for all")
            queue_count = len(names)
            for i, name in enumerate(names):
                params[f"queue_{i}"] = validate.queue_name(name)
        kind_count = None
        if kinds is not None:  # R23
            wanted = [kinds] if isinstance(kinds, str) else list(dict.fromkeys(kinds))
            if not wanted:
                raise ValueError("kinds must name at least one kind, or be None for all")
            kind_count = len(wanted)
            for i, kind in enumerate(wanted):
                params[f"kind_{i}"] = validate.kind(kind)
        plan = self._claim_plan(limit == 1, queue_count, kind_count)
        handed: list[tuple[Any, ...]] = []
        while True:
            outcomes = self._execute([(step, params) for step in plan.steps])
            rows = outcomes[-1][1]
            if plan.order_step:
                rank = {row[0]: i for i, row in enumerate(outcomes[-2][1])}
                rows.sort(key=lambda r: rank[r[ID]])
            elif limit > 1:
                rows.sort(key=lambda r: (r[PRIORITY], r[READY_AT], r[ID]))
            live = [r for r in rows if r[STATE] == "running"]
            handed += live
            # The claim wrote dead the rows it met whose lease had ended on their last
            # attempt (R08) and dropped them: it looks again for the room they took, after
            # them in claim order. Each pass writes at least one such row, so this ends.
            if len(live) == len(rows) or len(handed) >= limit:
                break
            params["limit"] = limit - len(handed)
        return [
            Job(
                id=r[ID],
                kind=r[KIND],
                payload=r[PAYLOAD],
                queue=r[QUEUE],
                priority=r[PRIORITY],
                attempts=r[ATTEMPTS],
                max_attempts=r[MAX_ATTEMPTS],
                lease_token=params["token"],
                lease_expires_at=to_datetime(r[VISIBLE_AT]),
                trace_context=r[TRACE_CONTEXT],
            )
            for r in handed
        ]

    def _fence(self, job: Job, **params: Any) -> dict[str, Any]:
        return self._params(job_id=job.id, token=job.lease_token, **params)

    @reconnecting(after_commit=True)
    def complete(self, job: Job, *, effect: Effect | None = None, result: Any = None) -> bool:
        """R09/R10, and R24: a `result` is checked first (a bad one raises, nothing is
        written, the job stays running) and stored by the statement that passes the fence.
        Without one, the hot statement is the very same as before results existed."""
        if result is not None:
            result = validate.result(result, max_bytes=self.max_result_bytes)
        if effect is None:
            hot = self._hot_complete if result is None else self._hot_complete_result
            [(count, _, _)] = self._execute([(hot, self._completion(job, result))])
            return count == 1
        with self._write() as conn:
            if not self._complete_on(conn, job, result):
                return False
            effect(conn)
        return True

    def _completion(self, job: Job, result: Any) -> dict[str, Any]:
        return self._fence(job) if result is None else self._fence(job, result=result)

    def _complete_on(self, conn: Connection, job: Job, result: Any) -> bool:
        stmt = self._stmt_complete if result is None else self._stmt_complete_result
        return conn.execute(stmt, self._completion(job, result)).rowcount == 1

    @reconnecting(after_commit=True)
    def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Effect | None] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Completions:
        """Many completes in one transaction (one commit instead of one per job), each
        still fenced by its own token as in R09. With `effects`, each job's effect runs
        in a savepoint of its own, right after its fence passed (R10): one that raises
        rolls back only its own job, which stays running with its lease, is reported
        False, and its exception is kept in `errors` under its index. A database error
        (or a BaseException) rolls the whole batch back and propagates.

        `results` (one JSON value or None per job, R24) are all checked before anything
        is written: one that is not JSON or too big raises and completes no job."""
        batch = list(jobs)
        values = [
            None if v is None else validate.result(v, max_bytes=self.max_result_bytes)
            for v in _per_job("results", results, len(batch))
        ]
        if effects is None:
            if not batch:
                return Completions()
            if all(v is None for v in values):
                return Completions(self._complete_fenced(batch))
            steps = [
                (
                    self._hot_complete if v is None else self._hot_complete_result,
                    self._completion(job, v),
                )
                for job, v in zip(batch, values, strict=True)
            ]
            return Completions(count == 1 for count, _, _ in self._execute(steps))
        effects = _per_job("effects", effects, len(batch))
        outcome = Completions()
        with self._write() as conn:
            for index, (job, effect, result) in enumerate(zip(batch, effects, values, strict=True)):
                if effect is None:
                    outcome.append(self._complete_on(conn, job, result))
                    continue
                savepoint = conn.begin_nested()
                if not self._complete_on(conn, job, result):
                    savepoint.rollback()
                    outcome.append(False)
                    continue
                try:
                    effect(conn)
                except Exception as error:
                    if conn.invalidated:  # the connection died under the effect: not its fault
                        raise
                    savepoint.rollback()
                    outcome.errors[index] = error
                    outcome.append(False)
                else:
                    savepoint.commit()
                    outcome.append(True)
        return outcome

    @reconnecting(after_commit=True)
    def fail(
        self,
        job: Job,
        error: str,
        *,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Literal["queued", "dead"] | None:
        text = validate.error_text(error, ERROR_TEXT_LIMIT)
        if permanent or job.attempts >= job.max_attempts:
            stmt, params, outcome = self._hot_fail_dead, self._fence(job, error=text), "dead"
        else:
            delay = (
                self.backoff.delay(job.attempts)
                if retry_in is None
                else validate.non_negative_seconds("retry_in", retry_in)
            )
            stmt, outcome = self._hot_fail_retry, "queued"
            params = self._fence(job, error=text, delay=delay)
        [(changed, _, _)] = self._execute([(stmt, params)])
        return outcome if changed == 1 else None

    @reconnecting(after_commit=True)
    def heartbeat(self, job: Job) -> bool:
        params = self._fence(job, lease_seconds=self.lease_seconds)
        [(_, rows, _)] = self._execute([(self._hot_heartbeat, params)])
        if not rows:
            return False
        job.lease_expires_at = to_datetime(rows[0][0])
        return True

    @reconnecting(after_commit=True)
    def release(self, job: Job) -> bool:
        [(count, _, _)] = self._execute([(self._hot_release, self._fence(job))])
        return count == 1

    @reconnecting(after_commit=True)
    def cancel(self, job_id: int) -> bool:
        """R25: a queued or running job becomes cancelled; a running holder is fenced off
        (its reports change nothing, its next heartbeat says the job is lost)."""
        params = self._params(job_id=validate.job_id(job_id))
        with self._write() as conn:
            return conn.execute(self._stmt_cancel, params).rowcount == 1

    def wait(self, job_id: int, timeout: float = 30.0) -> JobSnapshot | None:
        """R26: the job's snapshot once it is done, dead or cancelled, or as it is when
        `timeout` seconds (real time) have passed; None for an unknown id."""
        job_id = validate.job_id(job_id)
        timeout = validate.non_negative_seconds("timeout", timeout)
        return wait_until_finished(
            lambda: self.get(job_id),
            lambda: self._finish_signal(job_id),
            timeout=timeout,
            pause_cap=self.wait_pause_cap,
        )

    # --- operating --------------------------------------------------------------------

    @reconnecting(after_commit=False)
    def requeue_dead(self, ids: Iterable[int] | None = None) -> list[int]:
        if ids is None:
            stmt, params = self._stmt_requeue_all, self._params()
        else:
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                raise TypeError(f"ids must be an iterable of job ids, or None for all: {ids!r}")
            wanted = [validate.job_id(i) for i in ids]
            if not wanted:
                return []
            stmt, params = self._stmt_requeue_ids, self._params(ids=wanted)
        with self._write() as conn:
            conn.execute(self._stmt_retire, self._params())  # R08's dead, written first
            return sorted(conn.execute(stmt, params).scalars())

    @reconnecting(after_commit=True)
    def stats(self, queue: str | None = None) -> dict[str, Any]:
        with self._read() as conn:
            live = conn.execute(self._stmt_live_counts, self._params()).all()
            dead = conn.execute(self._stmt_dead_counts).all()
            cancelled = conn.execute(self._stmt_cancelled_counts).all()
        per_queue: dict[str, dict[str, Any]] = {}
        per_kind: dict[str, dict[str, Any]] = {}
        for name, kind, state, count, ready_now, oldest in live:
            entries = [per_queue.setdefault(name, _empty_stats())]
            if state != "dead":  # dead by R08, not yet written: counted per queue only
                entries.append(_kind_entry(per_kind, kind))
            for entry in entries:
                entry[state] += count
                entry["ready_now"] += ready_now
                if oldest is not None:
                    entry["oldest_ready_age_s"] = max(entry["oldest_ready_age_s"], float(oldest))
        for name, count in dead:
            per_queue.setdefault(name, _empty_stats())["dead"] += count
        for name, count in cancelled:
            per_queue.setdefault(name, _empty_stats())["cancelled"] = count
        if queue is not None:
            return per_queue.get(queue, _empty_stats())
        overall = _empty_stats()
        for entry in per_queue.values():
            for key in ("queued", "running", "ready_now", "dead", "cancelled"):
                overall[key] += entry[key]
            overall["oldest_ready_age_s"] = max(
                overall["oldest_ready_age_s"], entry["oldest_ready_age_s"]
            )
        overall["queues"] = per_queue
        overall["kinds"] = per_kind
        return overall

    def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> int:
        older_than = validate.non_negative_seconds("older_than", older_than)
        batch = validate.at_least("batch", batch, 1)
        names = [states] if isinstance(states, str) else list(states)
        unknown = [s for s in names if s not in PURGEABLE]
        if unknown or not names:
            raise ValueError(f"states must be taken from {sorted(PURGEABLE)}, got {states!r}")
        total = 0
        for name in dict.fromkeys(names):
            while True:
                with self._write() as conn:
                    if name == "dead":  # R08's dead, written first
                        conn.execute(self._stmt_retire, self._params())
                    deleted = conn.execute(
                        self._stmt_purge[name], self._params(older_than=older_than, batch=batch)
                    ).rowcount
                total += deleted
                if deleted < batch:
                    break
        return total

    @reconnecting(after_commit=True)
    def now(self) -> float:
        """The queue's clock in epoch seconds (R20): what every rule reads, for code that
        must agree with it, such as periodic schedules (the server's clock on PostgreSQL,
        so workers on hosts with skewed clocks agree on when a tick is due)."""
        if self._clock is not None:
            return self._clock()
        with self._read() as conn:
            return float(conn.execute(select(self._now)).scalar_one())

    @reconnecting(after_commit=True)
    def get(self, job_id: int) -> JobSnapshot | None:
        with self._read() as conn:
            row = conn.execute(self._stmt_get, self._params(job_id=validate.job_id(job_id))).first()
        return None if row is None else _snapshot(row)

    @reconnecting(after_commit=True)
    def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> list[JobSnapshot]:
        """The newest dead jobs (all queues, or one), for a person deciding what to requeue."""
        params = self._params(limit=validate.at_least("limit", limit, 1))
        stmt = self._stmt_dead_all
        if queue is not None:
            params["queue"], stmt = validate.queue_name(queue), self._stmt_dead_in_queue
        with self._read() as conn:
            return [_snapshot(row) for row in conn.execute(stmt, params)]

    def close(self) -> None:
        for raw in list(self._hot_connections):
            raw.close()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> SQLQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _snapshot(row: Any) -> JobSnapshot:
    return JobSnapshot(
        id=row.id,
        kind=row.kind,
        queue=row.queue,
        payload=row.payload,
        priority=row.priority,
        state=row.state,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        last_error=row.last_error,
        worker=row.worker,
        dedupe_key=row.dedupe_key,
        created_at=to_datetime(row.created_at),
        visible_at=to_datetime(row.visible_at),
        finished_at=to_datetime(row.finished_at),
        result=row.result,
    )


def _per_job(name: str, values: Sequence[Any] | None, count: int) -> list[Any]:
    """One entry per job, or None for every job."""
    if values is None:
        return [None] * count
    if isinstance(values, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be a sequence with one entry per job, got {values!r}")
    listed = list(values)
    if len(listed) != count:
        raise ValueError(
            f"{name} must have one entry (or None) per job: {len(listed)} {name} for {count} jobs"
        )
    return listed


def _same_work(row: Mapping[str, Any], existing: Any) -> None:
    """R27: a dedupe key names one piece of work; the same key with another kind or
    payload is a mistake that returning the existing job would hide."""
    if existing.kind != row["kind"]:
        raise DedupeConflict(row["dedupe_key"], existing.id, "kind")
    if existing.payload != json.loads(json.dumps(row["payload"])):
        raise DedupeConflict(row["dedupe_key"], existing.id, "payload")


def _kind_entry(per_kind: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    """Live jobs of one kind over all queues; dead ones are counted per queue only (the
    dead-rows index has no kind, and counting finished rows by kind would scan them)."""
    empty = {"queued": 0, "running": 0, "ready_now": 0, "oldest_ready_age_s": 0.0}
    return per_kind.setdefault(kind, empty)


def _empty_stats() -> dict[str, Any]:
    return {
        "queued": 0,
        "running": 0,
        "ready_now": 0,
        "oldest_ready_age_s": 0.0,
        "dead": 0,
        "cancelled": 0,
    }
