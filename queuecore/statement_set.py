"""The statements of one queue, built once with its clock expression and compiled once
for its backend's dialect: what `Operations` plans with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from sqlalchemy import Double, bindparam, select
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from queuecore import statements
from queuecore.backend import Backend
from queuecore.compiled import Compiled
from queuecore.schema import CANCELLED, DEAD, DONE, jobs

PURGEABLE = {"done": DONE, "dead": DEAD, "cancelled": CANCELLED}


class ClaimPlan(NamedTuple):
    """The statements of one claim shape, run in one transaction; the claimed rows come
    from the last. `order_step` says the step before it lists the ids in claim order."""

    steps: tuple[Compiled, ...]
    order_step: bool


class StatementSet:
    backend: Backend
    now_sql: ColumnElement[float]

    def build_statements(self, now: ColumnElement[float]) -> None:
        s = statements
        self.stmt_complete = s.complete(now)
        self.stmt_complete_result = s.complete_with_result(now)
        self.stmt_requeue_all = s.requeue_dead(now, by_id=False)
        self.stmt_requeue_ids = s.requeue_dead(now, by_id=True)
        self.stmt_live_counts = s.live_counts(now)
        self.stmt_dead_counts = s.dead_counts()
        self.stmt_cancelled_counts = s.cancelled_counts()
        self.stmt_get = s.get(now)
        self.stmt_dead_all = s.dead_jobs(now, by_queue=False)
        self.stmt_dead_in_queue = s.dead_jobs(now, by_queue=True)
        self.stmt_retire = s.retire(now)
        self.stmt_cancel = s.cancel(now)
        self.stmt_purge = {name: s.purge_batch(now, state) for name, state in PURGEABLE.items()}
        self.stmt_now = select(now)
        self._plans: dict[tuple[bool, int | None, int | None], ClaimPlan] = {}
        self.hot_complete = self.compile(self.stmt_complete)
        self.hot_complete_result = self.compile(self.stmt_complete_result)
        self.hot_fail_retry = self.compile(s.fail_retry(now))
        self.hot_fail_dead = self.compile(s.fail_dead(now))
        self.hot_heartbeat = self.compile(s.heartbeat(now))
        self.hot_release = self.compile(s.release(now))
        fresh = {"visible_at": now + bindparam("delay", type_=Double), "created_at": now}
        at = {"visible_at": bindparam("run_at", type_=Double), "created_at": now}
        self.stmt_enqueue_in = self._enqueue_statement(fresh)
        self.stmt_enqueue_at = self._enqueue_statement(at)
        self.stmt_enqueue_many = (
            self.backend.insert(jobs)
            .values(**fresh)
            .returning(jobs.c.id, sort_by_parameter_order=True)
        )
        self.hot_enqueue_in = self.compile(self.backend.announcing(s.enqueue_one(fresh)))
        self.hot_enqueue_at = self.compile(self.backend.announcing(s.enqueue_one(at)))
        #: enqueue_many in one statement, where the backend has one (`Backend.build`).
        self.hot_enqueue_many: Compiled | None = None
        self.stmt_dedupe_lookup = select(jobs.c.id, jobs.c.kind, jobs.c.payload).where(
            jobs.c.dedupe_key == bindparam("dedupe_key")
        )

    def _enqueue_statement(self, times: Mapping[str, Any]) -> Any:
        return (
            self.backend.insert(jobs)
            .values(**times)
            .on_conflict_do_nothing(index_elements=[jobs.c.dedupe_key])
            .returning(jobs.c.id)
        )

    def compile(self, statement: ClauseElement) -> Compiled:
        return Compiled(statement, self.backend.dialect)

    def claim_plan(self, one: bool, queue_count: int | None, kind_count: int | None) -> ClaimPlan:
        """The claim's statements for this shape, compiled on first use."""
        plan = self._plans.get((one, queue_count, kind_count))
        if plan is not None:
            return plan
        now, from_columns = self.now_sql, self.backend.returns_from_columns
        claim = (
            statements.claim_one(now, queue_count, kind_count)
            if one
            else statements.claim(now, queue_count, kind_count)
        )
        steps: list[ClauseElement] = []
        order_step = not one and not from_columns
        if order_step:
            steps.append(statements.claim_order(now, queue_count, kind_count))
        steps.append(claim)
        plan = ClaimPlan(tuple(self.compile(step) for step in steps), order_step)
        self._plans[(one, queue_count, kind_count)] = plan
        return plan
