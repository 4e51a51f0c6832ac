"""Every operation of the queue, with no I/O: the rules of the contract live here once.

For each operation: the checks on its arguments, which statements to send with which
parameters, and how the rows that come back become the answer. It hands an executor a
plan (`queuecore.core.plans`); `SQLQueue` runs plans on a blocking connection, `AsyncQueue`
awaits them, so the two faces cannot drift apart (as httpx keeps `BaseClient` free of
I/O under `Client` and `AsyncClient`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Double, bindparam

from queuecore.core import claim_steps, programs, shaping, tracing, validate, worker_records
from queuecore.core.backoff import Backoff
from queuecore.core.options import Clock, QueueOptions
from queuecore.core.plans import Hot, Outcome, Plan, Plans, Ready, Run, Tx
from queuecore.core.shaping import ID, PRIORITY, READY_AT, STATE
from queuecore.core.statement_set import PURGEABLE, StatementSet
from queuecore.core.statistics import StatisticsWatch
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo, to_datetime
from queuecore.sql.schema import STATES

if TYPE_CHECKING:
    from queuecore.contract import Backend

#: The most jobs one read of `held` asks about (a statement of this many parameters).
HELD_BATCH = 256


class Operations(StatementSet):
    """The queue's options, its statements (`StatementSet`) and one method per operation
    that answers with a plan."""

    def __init__(self, backend: Backend, options: QueueOptions = QueueOptions()) -> None:
        self.backend = backend
        self.lease_seconds = validate.positive_seconds("lease_seconds", options.lease_seconds)
        self.max_attempts = validate.at_least(
            "max_attempts", options.max_attempts, 1, validate.INT32[1]
        )
        self.max_payload_bytes = validate.at_least(
            "max_payload_bytes", options.max_payload_bytes, 1
        )
        self.max_result_bytes = validate.at_least("max_result_bytes", options.max_result_bytes, 1)
        self.backoff = Backoff(
            base=validate.non_negative_seconds("backoff_base", options.backoff_base),
            cap=validate.non_negative_seconds("backoff_cap", options.backoff_cap),
            **({"rng": options.rng} if options.rng is not None else {}),
        )
        clock = options.clock
        server_now = backend.server_now() if clock is None else None
        self.clock: Clock | None = None if server_now is not None else (clock or time.time)
        self.now_sql = server_now if server_now is not None else bindparam("now", type_=Double)
        self.build_statements(self.now_sql)
        backend.build(self)
        check, refresh = backend.claim_sort_check(), backend.refresh_statistics()
        self.statistics = (
            StatisticsWatch(check, self.compile(refresh))
            if check is not None and refresh is not None
            else None
        )

    def params(self, **params: Any) -> dict[str, Any]:
        """Every statement's parameters; `now` is read once per statement from the clock."""
        if self.clock is not None:
            params["now"] = self.clock()
        return params

    def fence(self, job: Job, **params: Any) -> dict[str, Any]:
        return self.params(job_id=job.id, token=job.lease_token, **params)

    # --- producing -------------------------------------------------------------------

    def _row(
        self, kind: str, payload: object, queue: str, priority: int, max_attempts: int | None
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
        conn: Any = None,
    ) -> Hot[EnqueueResult] | Tx[EnqueueResult]:
        row = self._row(kind, payload, queue, priority, max_attempts)
        row["dedupe_key"] = validate.optional_text("dedupe_key", dedupe_key)
        if run_at is not None:
            if delay:
                raise ValueError("pass delay or run_at, not both")
            row["run_at"] = validate.epoch("run_at", run_at)
            stmt = self.stmt_enqueue_at
        else:
            row["delay"] = validate.non_negative_seconds("delay", delay)
            stmt = self.stmt_enqueue_in
        if conn is None and row["dedupe_key"] is None:  # a web request's path: one statement
            hot = self.hot_enqueue_in if run_at is None else self.hot_enqueue_at
            return Hot([(hot, self.params(**row))], _created)
        return Tx(programs.insert_deduplicated(self, stmt, row), conn=conn)

    def enqueue_many(
        self,
        kind: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        conn: Any = None,
    ) -> Plan[list[int]]:
        if isinstance(payloads, Mapping):
            raise TypeError("enqueue_many takes an iterable of payloads, not one payload")
        rows = [self._row(kind, p, queue, priority, max_attempts) for p in payloads]
        if not rows:
            return Ready([])
        now = self.params()
        if conn is None and self.hot_enqueue_many is not None:
            batch = {**rows[0], **now, "payloads": [row["payload"] for row in rows]}
            return Hot([(self.hot_enqueue_many, batch)], _sorted_ids)
        params = [{**row, **now, "delay": 0.0, "dedupe_key": None} for row in rows]
        return Tx(programs.insert_many(self, params, rows[0]["queue"]), conn=conn)

    # --- consuming --------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        *,
        limit: int = 1,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Hot[list[Job]] | Tx[list[Job]]:
        validate.text("worker", worker)
        limit = validate.at_least("limit", limit, 1)
        params = self.params(
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
        if self.backend.locks_rows_it_walks_past:
            steps = self.claim_steps(queue_count, kind_count)
            contention = self.contention
            program = claim_steps.claim(steps, params, limit, contention)
            return Tx(program, hot=True, turn=contention.turns())
        plan = self.claim_plan(limit == 1, queue_count, kind_count)
        handed: list[tuple[Any, ...]] = []

        def finish(outcomes: list[Outcome]) -> list[Job] | Hot[list[Job]]:
            rows = outcomes[-1][1]
            if plan.order_step:
                rank = {row[0]: i for i, row in enumerate(outcomes[-2][1])}
                rows.sort(key=lambda r: rank[r[ID]])
            elif limit > 1:
                rows.sort(key=lambda r: (r[PRIORITY], r[READY_AT], r[ID]))
            live = [r for r in rows if r[STATE] == "running"]
            handed.extend(live)
            # The claim wrote dead the rows it met whose lease had ended on their last
            # attempt (R08) and dropped them: it looks again for the room they took, after
            # them in claim order. Each pass writes at least one such row, so this ends.
            if len(live) == len(rows) or len(handed) >= limit:
                jobs = shaping.claimed_jobs(handed, params["token"])
                if self.statistics is not None and limit > 1 and len(jobs) == limit:
                    return self.statistics.after_full_claim(plan.steps[-1], params, jobs)
                return jobs
            params["limit"] = limit - len(handed)
            return again

        again = Hot([(step, params) for step in plan.steps], finish)
        return again

    def complete(self, job: Job, *, effect: Any = None, result: Any = None) -> Hot[bool] | Tx[bool]:
        """R09/R10, and R24: a `result` is checked first (a bad one raises, nothing is
        written, the job stays running) and stored by the statement that passes the fence.
        Without one, the hot statement is the very same as before results existed."""
        if result is not None:
            result = validate.result(result, max_bytes=self.max_result_bytes)
        if effect is None:
            hot = self.hot_complete if result is None else self.hot_complete_result
            return Hot([(hot, self._completion(job, result))], _changed)
        return Tx(programs.complete_with_effect(self, job, effect, result), calls_back=True)

    def _completion(self, job: Job, result: Any) -> dict[str, Any]:
        return self.fence(job) if result is None else self.fence(job, result=result)

    def complete_on(self, job: Job, result: Any) -> Run:
        stmt = self.stmt_complete if result is None else self.stmt_complete_result
        return Run(stmt, self._completion(job, result))

    def complete_many(
        self,
        jobs: Sequence[Job],
        *,
        effects: Sequence[Any] | None = None,
        results: Sequence[Any] | None = None,
    ) -> Plan[Completions]:
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
            for v in shaping.per_job("results", results, len(batch))
        ]
        if effects is None:
            if not batch:
                return Ready(Completions())
            if all(v is None for v in values):
                if not self.backend.update_returning:  # two statements, not one per job
                    return Tx(programs.complete_picked(self, batch))
                return self.backend.complete_fenced(self, batch)
            steps = [
                (
                    self.hot_complete if v is None else self.hot_complete_result,
                    self._completion(job, v),
                )
                for job, v in zip(batch, values, strict=True)
            ]
            return Hot(steps, lambda outcomes: Completions(c == 1 for c, _, _ in outcomes))
        listed = shaping.per_job("effects", effects, len(batch))
        return Tx(programs.complete_each(self, batch, listed, values), calls_back=True)

    def fail(
        self, job: Job, error: str, *, retry_in: float | None = None, permanent: bool = False
    ) -> Hot[Literal["queued", "dead"] | None]:
        text = validate.error_text(error, validate.ERROR_TEXT_LIMIT)
        if permanent or job.attempts >= job.max_attempts:
            return Hot([(self.hot_fail_dead, self.fence(job, error=text))], _dead_or_none)
        delay = (
            self.backoff.delay(job.attempts)
            if retry_in is None
            else validate.non_negative_seconds("retry_in", retry_in)
        )
        params = self.fence(job, error=text, delay=delay)
        return Hot([(self.hot_fail_retry, params)], _queued_or_none)

    def heartbeat(self, job: Job) -> Hot[bool]:
        def finish(outcomes: list[Outcome]) -> bool:
            # The lease's end is the last step's row: the UPDATE's own RETURNING, or a
            # read after an UPDATE that must then have passed the fence itself.
            rows = outcomes[-1][1]
            if not rows or (len(outcomes) > 1 and outcomes[0][0] != 1):
                return False
            job.lease_expires_at = to_datetime(rows[0][0])
            return True

        params = self.fence(job, lease_seconds=self.lease_seconds)
        return Hot([(step, params) for step in self.hot_heartbeat], finish)

    def release(self, job: Job) -> Hot[bool]:
        return Hot([(self.hot_release, self.fence(job))], _changed)

    def held(self, jobs: Sequence[Job]) -> Hot[list[bool]] | Ready[list[bool]]:
        """W9: per job, whether its claim still holds it (its fence would pass, R09), in
        one read per HELD_BATCH jobs: what a worker asks before it hands jobs claimed
        ahead to their handlers (a cancelled one never starts), and every fraction of a
        second while handlers run (a cancel is heard)."""
        batch = list(jobs)
        if not batch:
            return Ready([])
        found: dict[int, str] = {}

        def round_of(start: int) -> Hot[list[bool]]:
            part = batch[start : start + HELD_BATCH]
            size = 1 << (len(part) - 1).bit_length()  # a few shapes, each compiled once
            params = self.params(
                **{f"job_{i}": part[min(i, len(part) - 1)].id for i in range(size)}
            )

            def finish(outcomes: list[Outcome]) -> list[bool] | Hot[list[bool]]:
                found.update((row[0], row[1]) for row in outcomes[0][1])
                if start + HELD_BATCH < len(batch):
                    return round_of(start + HELD_BATCH)
                return [found.get(job.id) == job.lease_token for job in batch]

            return Hot([(self.held_statement(size), params)], finish)

        return round_of(0)

    def mark_started(self, jobs: Sequence[Job]) -> Hot[int] | Ready[int]:
        """W9: these jobs' handlers have started; `started_at` tells them from the jobs
        held ahead of a slot. One write per HELD_BATCH jobs, made by the lease keeper
        about every half second on its own connection (the hot path's, as its
        heartbeats: a worker's connections do not grow); how many rows it marked."""
        batch = list(jobs)
        if not batch:
            return Ready(0)
        marked = 0

        def round_of(start: int) -> Hot[int]:
            part = batch[start : start + HELD_BATCH]
            size = 1 << (len(part) - 1).bit_length()  # a few shapes, each compiled once
            last = len(part) - 1
            params = self.params(
                **{f"job_{i}": part[min(i, last)].id for i in range(size)},
                **{f"token_{i}": part[min(i, last)].lease_token for i in range(size)},
            )

            def finish(outcomes: list[Outcome]) -> int | Hot[int]:
                nonlocal marked
                marked += outcomes[0][0]
                if start + HELD_BATCH < len(batch):
                    return round_of(start + HELD_BATCH)
                return marked

            return Hot([(self.started_statement(size), params)], finish)

        return round_of(0)

    def cancel(self, job_id: int) -> Tx[bool]:
        """R25: a queued or running job becomes cancelled; a running holder is fenced off
        (its reports change nothing, its next heartbeat says the job is lost)."""
        job_id = validate.job_id(job_id)
        return Tx(programs.cancel(self, Run(self.stmt_cancel, self.params(job_id=job_id)), job_id))

    # --- operating --------------------------------------------------------------------

    def requeue_dead(self, ids: Iterable[int] | None = None) -> Tx[list[int]] | Ready[list[int]]:
        if ids is None:
            stmt, params, by_id = self.stmt_requeue_all, self.params(), False
        else:
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                raise TypeError(f"ids must be an iterable of job ids, or None for all: {ids!r}")
            wanted = [validate.job_id(i) for i in ids]
            if not wanted:
                return Ready([])
            stmt, params, by_id = self.stmt_requeue_ids, self.params(ids=wanted), True
        pick = None if self.backend.update_returning else self.stmt_requeue_pick[by_id]
        return Tx(programs.requeue(self, stmt, params, pick))

    def stats(self, queue: str | None = None) -> Tx[dict[str, Any]]:
        return Tx(programs.count(self, queue), write=False)

    def purge(
        self, *, older_than: float = 86400, states: Sequence[str] = ("done",), batch: int = 1000
    ) -> Plans[int]:
        older_than = validate.non_negative_seconds("older_than", older_than)
        batch = validate.at_least("batch", batch, 1)
        names = [states] if isinstance(states, str) else list(states)
        unknown = [s for s in names if s not in PURGEABLE]
        if unknown or not names:
            raise ValueError(f"states must be taken from {sorted(PURGEABLE)}, got {states!r}")
        return programs.purge_batches(self, list(dict.fromkeys(names)), older_than, batch)

    def now(self) -> Tx[float] | Ready[float]:
        """The queue's clock in epoch seconds (R20): what every rule reads, for code that
        must agree with it, such as periodic schedules (the server's clock on PostgreSQL,
        so workers on hosts with skewed clocks agree on when a tick is due)."""
        if self.clock is not None:
            return Ready(self.clock())
        return Tx(
            programs.read_now(
                self,
            ),
            write=False,
        )

    def get(self, job_id: int) -> Tx[JobSnapshot | None]:
        return Tx(programs.get(self, self.params(job_id=validate.job_id(job_id))), write=False)

    def dead_jobs(self, queue: str | None = None, *, limit: int = 100) -> Tx[list[JobSnapshot]]:
        """The newest dead jobs (all queues, or one), for a person deciding what to requeue."""
        params = self.params(limit=validate.at_least("limit", limit, 1))
        stmt = self.stmt_dead_all
        if queue is not None:
            params["queue"], stmt = validate.queue_name(queue), self.stmt_dead_in_queue
        return Tx(programs.snapshots(self, stmt, params), write=False)

    def list_jobs(
        self,
        state: str | Sequence[str] | None = None,
        kind: str | Sequence[str] | None = None,
        queue: str | Sequence[str] | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> Tx[list[JobSnapshot]]:
        """R31: jobs in id order after `after_id` (a cursor: pass the last id of a page to
        get the next), filtered by state, kind and queue, each one value or a list."""
        states = _one_or_many("state", state, _state)
        kinds = _one_or_many("kind", kind, validate.kind)
        queues = _one_or_many("queue", queue, validate.queue_name)
        params = self.params(
            after_id=0 if after_id is None else validate.job_id(after_id),
            limit=validate.at_least("limit", limit, 1),
        )
        if kinds is not None:
            params["kinds"] = kinds
        if queues is not None:
            params["queues"] = queues
        key = None if states is None else tuple(sorted(set(states)))
        stmt = self.list_statement(key, kinds is not None, queues is not None)
        return Tx(programs.snapshots(self, stmt, params), write=False)

    def report_worker(self, name: str, record: Mapping[str, Any]) -> Tx[None]:
        """R33: a worker's record of itself, written at its start and on its heartbeat."""
        checked = dict(record)
        checked["concurrency"] = validate.at_least("concurrency", record["concurrency"], 1)
        checked["heartbeat_seconds"] = validate.positive_seconds(
            "heartbeat_seconds", record["heartbeat_seconds"]
        )
        return worker_records.report(self, validate.text("worker", name), checked)

    def forget_worker(self, name: str) -> Tx[None]:
        return worker_records.forget(self, validate.text("worker", name))

    def workers(self) -> Tx[list[WorkerInfo]]:
        return worker_records.listed(self)

    def wait_arguments(self, job_id: int, timeout: float) -> tuple[int, float]:
        """R26's arguments, checked before anything waits."""
        return validate.job_id(job_id), validate.non_negative_seconds("timeout", timeout)


class OptionsView:
    """The queue's options as attributes of either face (`ops` holds them)."""

    ops: Operations

    @property
    def lease_seconds(self) -> float:
        return self.ops.lease_seconds

    @property
    def max_attempts(self) -> int:
        return self.ops.max_attempts

    @property
    def max_payload_bytes(self) -> int:
        return self.ops.max_payload_bytes

    @property
    def max_result_bytes(self) -> int:
        return self.ops.max_result_bytes

    @max_result_bytes.setter
    def max_result_bytes(self, value: int) -> None:
        self.ops.max_result_bytes = value


def _one_or_many(
    name: str, value: str | Sequence[str] | None, check: Callable[[object], str]
) -> list[str] | None:
    """A filter of `list_jobs`: None (no filter), one value, or a non-empty list."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    if not values:
        raise ValueError(f"{name} must name at least one value, or be None for all")
    return [check(v) for v in values]


def _state(value: object) -> str:
    if value not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, got {value!r}")
    return str(value)


def _created(outcomes: list[Outcome]) -> EnqueueResult:
    return EnqueueResult(id=outcomes[0][1][0][0], created=True)


def _sorted_ids(outcomes: list[Outcome]) -> list[int]:
    return sorted(row[0] for row in outcomes[0][1])  # ids grow in the payloads' order


def _changed(outcomes: list[Outcome]) -> bool:
    return outcomes[0][0] == 1


def _dead_or_none(outcomes: list[Outcome]) -> Literal["dead"] | None:
    return "dead" if outcomes[0][0] == 1 else None


def _queued_or_none(outcomes: list[Outcome]) -> Literal["queued"] | None:
    return "queued" if outcomes[0][0] == 1 else None
