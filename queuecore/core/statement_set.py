"""The statements of one queue, built once with its clock expression and compiled once
for its backend's dialect: what `Operations` plans with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Double, bindparam, select
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from queuecore.core.claim_steps import ClaimSteps, Contention
from queuecore.core.worker_records import WorkerStatements
from queuecore.sql import statements
from queuecore.sql.compiled import Compiled
from queuecore.sql.schema import CANCELLED, DEAD, DONE, jobs

if TYPE_CHECKING:
    from queuecore.contract import Backend

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
        returning, subquery = self.backend.update_returning, self.backend.writes_read_own_table
        self.stmt_complete = s.complete(now)
        self.stmt_complete_result = s.complete_with_result(now)
        #: Where an UPDATE returns nothing: many completes as a locked read of their
        #: fences, then one UPDATE of those that passed.
        self.stmt_complete_pick = s.complete_pick(now)
        self.stmt_complete_picked = s.complete_picked(now)
        self.stmt_requeue_all = s.requeue_dead(now, by_id=False, returning=returning)
        self.stmt_requeue_ids = s.requeue_dead(now, by_id=True, returning=returning)
        #: Where an UPDATE returns nothing: the ids each requeue takes, read first.
        self.stmt_requeue_pick = {
            False: s.dead_to_requeue(by_id=False),
            True: s.dead_to_requeue(by_id=True),
        }
        self.stmt_live_counts = s.live_counts(now, self.backend.walk())
        self.stmt_dead_counts = s.dead_counts()
        self.stmt_cancelled_counts = s.cancelled_counts()
        self.stmt_get = s.get(now)
        self.stmt_dead_all = s.dead_jobs(now, by_queue=False)
        self.stmt_dead_in_queue = s.dead_jobs(now, by_queue=True)
        self.stmt_retire = s.retire(now, subquery=subquery)
        self.stmt_cancel = s.cancel(now)
        self.stmt_purge = {
            name: s.purge_batch(now, state, subquery=subquery) for name, state in PURGEABLE.items()
        }
        self.stmt_now = select(now)
        self.worker_statements = WorkerStatements(now)
        self._lists: dict[tuple[tuple[str, ...] | None, bool, bool], Any] = {}
        self._plans: dict[tuple[bool, int | None, int | None], ClaimPlan] = {}
        self._steps: dict[tuple[int | None, int | None], ClaimSteps] = {}
        #: When this queue's claims in steps last met another claim's locks.
        self.contention = Contention()
        self._held: dict[int, Compiled] = {}
        self._started: dict[int, Compiled] = {}
        self._fences: dict[int, Compiled] = {}
        self.hot_complete = self.compile(self.stmt_complete)
        self.hot_complete_result = self.compile(self.stmt_complete_result)
        self.hot_fail_retry = self.compile(s.fail_retry(now))
        self.hot_fail_dead = self.compile(s.fail_dead(now))
        #: The heartbeat, then (where an UPDATE returns nothing) the read of its lease's end.
        self.hot_heartbeat = tuple(
            self.compile(step)
            for step in (
                [s.heartbeat(now)]
                if returning
                else [s.heartbeat(now, returning=False), s.lease_end()]
            )
        )
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
        if not self.backend.skips_conflicting_inserts:
            # After a duplicate key in a savepoint: a plain read in the caller's older
            # snapshot (REPEATABLE READ) could miss the row that took the key.
            self.stmt_dedupe_lookup = self.stmt_dedupe_lookup.with_for_update(read=True)

    def _enqueue_statement(self, times: Mapping[str, Any]) -> Any:
        """The insert of a job that may carry a dedupe key: where the database can, one
        that writes nothing when the key is taken (else a savepoint covers it)."""
        stmt = self.backend.insert(jobs).values(**times)
        if self.backend.skips_conflicting_inserts:
            stmt = stmt.on_conflict_do_nothing(index_elements=[jobs.c.dedupe_key])
        return stmt.returning(jobs.c.id)

    def compile(self, statement: ClauseElement) -> Compiled:
        return Compiled(statement, self.backend.dialect)

    def list_statement(self, states: tuple[str, ...] | None, by_kind: bool, by_queue: bool) -> Any:
        """`list_jobs`' statement for this shape of filters (R31), built on first use."""
        key = (states, by_kind, by_queue)
        stmt = self._lists.get(key)
        if stmt is None:
            stmt = statements.list_jobs(
                self.now_sql, states, by_kind=by_kind, by_queue=by_queue, walk=self.backend.walk()
            )
            self._lists[key] = stmt
        return stmt

    def held_statement(self, count: int) -> Compiled:
        """`held`'s read of `count` jobs, compiled on first use."""
        return self._sized(self._held, statements.held_of, count)

    def started_statement(self, count: int) -> Compiled:
        """`mark_started`'s write of `count` jobs, compiled on first use."""
        return self._sized(self._started, statements.started_of, count)

    def fences_statement(self, count: int) -> Compiled:
        """The fenced completes of `count` jobs in one statement (where a backend sends
        them so, `Backend.complete_fenced`), compiled on first use."""
        return self._sized(self._fences, statements.complete_fences, count)

    def _sized(
        self, cache: dict[int, Compiled], build: Callable[[Any, int], Any], count: int
    ) -> Compiled:
        compiled = cache.get(count)
        if compiled is None:
            compiled = cache[count] = self.compile(build(self.now_sql, count))
        return compiled

    def claim_steps(self, queue_count: int | None, kind_count: int | None) -> ClaimSteps:
        """The statements of a claim in steps (`queuecore.core.claim_steps`) for this shape."""
        steps = self._steps.get((queue_count, kind_count))
        if steps is None:
            walk = self.backend.walk()
            steps = ClaimSteps(self.compile, self.now_sql, walk, queue_count, kind_count)
            self._steps[(queue_count, kind_count)] = steps
        return steps

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
