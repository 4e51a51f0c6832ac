"""R19 (and R16's "never scans finished rows"): the hot statements read partial indexes
over live rows, so their cost does not grow with the finished rows. Checked on the
query plans of the real statements from `queuecore.sql.statements`, never on timings."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Double, bindparam
from sqlalchemy.sql.elements import ColumnElement

from queuecore.conformance.fixtures import FakeClock
from queuecore.conformance.harness import PRIMARY_KEY, Harness, Plan
from queuecore.executors.sqlqueue import SQLQueue
from queuecore.sql import statements
from queuecore.sql.compiled import Compiled
from queuecore.sql.schema import jobs

FINISHED_ROWS = 100_000
READY = {"ix_queuecore_jobs_ready", "ix_queuecore_jobs_ready_by_queue"}
LEASES = "ix_queuecore_jobs_leases"
KINDS = (None, 1, 2)  # R23: no kinds filter, one kind, two


def explain(harness: Harness, conn: sa.Connection, stmt: Any, params: dict[str, Any]) -> Plan:
    """The plan of the statement as the queue sends it: compiled for this dialect, with
    bound parameters (the state names are the only literals, as in the real statements)."""
    compiled = stmt.compile(dialect=conn.dialect)
    sent = compiled.construct_expanded_state(params)
    if compiled.positional:
        return harness.explain(conn, sent.statement, tuple(sent.positional_parameters))
    return harness.explain(conn, sent.statement, sent.parameters)


def nows(queue: SQLQueue) -> list[ColumnElement[float]]:
    """The time expressions the queue's statements are built with: a bound parameter for
    an injected (or local) clock, and the server's clock where that is the default."""
    found = [bindparam("now", type_=Double)]
    server = queue.backend.server_now()  # the backend's hook for its default clock
    if server is not None:
        found.append(server)
    return found


def numbers(name: str, count: int) -> Any:
    """0 … count-1, by a recursive CTE (short enough for MariaDB's 1,000 iterations)."""
    n = sa.select(sa.literal(0).label("i")).cte(name, recursive=True)
    return n.union_all(sa.select(n.c.i + 1).where(n.c.i < count - 1))


@pytest.fixture
def crowded(queue: SQLQueue, db: sa.Engine, clock: FakeClock, harness: Harness) -> SQLQueue:
    """100,000 finished rows (every 50th dead) in the same queues as a few live ones."""
    thousands, units = numbers("thousands", FINISHED_ROWS // 1000), numbers("units", 1000)
    every = thousands.join(units, sa.true())
    n = sa.select((thousands.c.i * 1000 + units.c.i + 1).label("i")).select_from(every).subquery()
    finished_at = clock.now - 1_000_000 + n.c.i
    rows = sa.select(
        sa.literal("k"),
        sa.literal("q") + sa.cast(n.c.i % 3, sa.Text),
        sa.literal({}, jobs.c.payload.type),
        sa.literal(0),
        sa.case((n.c.i % 50 == 0, "dead"), else_="done"),
        sa.literal(1),
        sa.literal(5),
        finished_at,
        finished_at,
        finished_at,
    )
    columns = ["kind", "queue", "payload", "priority", "state", "attempts", "max_attempts"]
    columns += ["visible_at", "created_at", "finished_at"]
    with db.begin() as conn:
        conn.execute(jobs.insert().from_select(columns, rows))
    for name in ("q0", "q1", "q2"):
        queue.enqueue_many("k", [{}] * 10, queue=name)
    queue.claim("w", limit=5)
    with db.begin() as conn:
        harness.analyze(conn)
    return queue


def claim_statements(
    queue: SQLQueue, one: bool, queue_count: int | None, kind_count: int | None
) -> list[tuple[Any, dict[str, Any]]]:
    """What a claim of this shape sends, and the parameters to explain each with: the hot
    path's compiled steps, or the claim in steps (`queuecore.core.claim_steps`) with ids."""
    if not queue.backend.locks_rows_it_walks_past:
        return [(step, {}) for step in queue.ops.claim_plan(one, queue_count, kind_count).steps]
    steps = queue.ops.claim_steps(queue_count, kind_count)
    by_ids = {"id_0": 1, "id_1": 2, "passed_0": 3, "wanted": 18, "lease_end": 0.0}
    sent = [steps.candidates(0), steps.candidates(1), steps.lock(2)]
    sent += [steps.write_dead(2), steps.write_claimed(2)]
    return [(stmt, by_ids) for stmt in sent]


@pytest.mark.parametrize("clock_source", ["injected", "default"])
def test_r19_every_claim_shape_reads_the_ready_index(
    crowded, make_queue, db, clock, harness, clock_source
):
    """Every claim shape (one job or many; all queues, one, or several; any kind, one or
    several, R23) as the queue sends it. A one-job claim is one statement on both backends
    (R08's dead state is written by the claim that meets the row, amended R08); SQLite's
    many-job claim lists the claim order first, in the claim's transaction. The finished
    rows are of the kind named, so only the live-rows index can keep a kinds claim from
    walking them."""
    queue = crowded if clock_source == "injected" else make_queue(clock=None)
    params = {
        "now": clock.now,
        "limit": 10,
        "lease_seconds": 30.0,
        "token": "t",
        "claimant": "w",
        "queue_0": "q0",
        "queue_1": "q2",
        "kind_0": "k",
        "kind_1": "other",
    }
    for one, queue_count, kind_count in itertools.product((True, False), (None, 1, 2), KINDS):
        sent = claim_statements(queue, one, queue_count, kind_count)
        with db.connect() as conn:
            plans = [
                harness.explain(conn, stmt.sql, stmt.parameters({**params, **more}))
                if isinstance(stmt, Compiled)
                else explain(harness, conn, stmt, {**params, **more})
                for stmt, more in sent
            ]
        if one and not queue.backend.locks_rows_it_walks_past:
            assert len(sent) == 1, sent  # R08's dead state is written by this one statement
        for plan in plans:
            assert plan.indexes and plan.indexes <= READY | {PRIMARY_KEY}, plan
            assert not plan.full_scan, plan
        # The claim (or its order, or its candidates) reads the ready index in claim
        # order; for named queues a planner may sort their few live rows instead (seen
        # on PostgreSQL, and on SQLite 3.53): no finished row is read either way.
        picking = [plan for plan in plans if plan.indexes & READY]
        assert picking and (queue_count is not None or not any(p.sorts for p in picking))


def test_r08_reads_of_lost_leases_use_the_partial_indexes(crowded, db, clock, harness):
    """What finds the running rows that are dead by R08 reads the leases index, beside
    the dead index for the dead list: none of it walks the finished rows. For one queue,
    the planner may take the live rows by queue instead (measured on PostgreSQL once its
    statistics had seen the crowd): that index holds no finished row either."""
    params = {"now": clock.now, "limit": 10, "queue": "q1", "job_id": 1}
    dead = harness.index_names["dead"]
    subquery = crowded.backend.writes_read_own_table
    for now in nows(crowded):
        with db.connect() as conn:
            retire = explain(harness, conn, statements.retire(now, subquery=subquery), params)
            listed = [
                explain(harness, conn, statements.dead_jobs(now, by_queue=by_queue), params)
                for by_queue in (False, True)
            ]
            got = explain(harness, conn, statements.get(now), params)
        assert LEASES in retire.indexes and not retire.full_scan, retire
        everywhere, by_queue = listed
        assert everywhere.indexes <= {*dead, LEASES} and LEASES in everywhere.indexes, everywhere
        # Where one index leads with (state, queue), it serves both parts (MariaDB's).
        live = {LEASES, *READY}
        assert by_queue.indexes <= {*dead, *live} and by_queue.indexes, by_queue
        for plan in listed:
            assert not plan.full_scan, plan
        assert got.indexes == {PRIMARY_KEY} and not got.full_scan, got


def test_r16_stats_never_scans_finished_rows(crowded, db, clock, harness):
    walk = crowded.backend.walk()
    for now in nows(crowded):
        with db.connect() as conn:
            live = explain(harness, conn, statements.live_counts(now, walk), {"now": clock.now})
            dead = explain(harness, conn, statements.dead_counts(), {})

        assert live.indexes and live.indexes <= READY and not live.full_scan, live
        assert dead.indexes and dead.indexes <= harness.index_names["dead"], dead
        assert not dead.full_scan, dead
    with db.connect() as conn:
        cancelled = explain(harness, conn, statements.cancelled_counts(), {})
    assert cancelled.indexes and cancelled.indexes <= harness.index_names["cancelled"], cancelled
    assert not cancelled.full_scan, cancelled


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])  # a plan cache is PostgreSQL's alone
@pytest.mark.parametrize("clock_source", ["injected", "default"])
def test_one_job_claim_keeps_one_plan_on_postgresql(make_queue, db, backend, harness, clock_source):
    """The driver prepares a statement it runs often; the server then plans it once, unless
    a generic plan looks dearer than planning each call. A one-job claim must not look so
    (a bound LIMIT did): re-planning it on every claim cost more CPU than running it."""
    # Enough ready rows that a generic plan priced at a tenth of them looks dear; enqueued
    # by another queue, so this one's connection holds only what a claim prepared.
    make_queue().enqueue_many("k", [{}] * 10_000)
    with db.begin() as conn:
        harness.analyze(conn)
    queue = make_queue() if clock_source == "injected" else make_queue(clock=None)
    for _ in range(20):
        [job] = queue.claim("w")
        assert queue.complete(job)
    _, driver = queue.hot.connection()
    prepared = driver.execute(
        "SELECT statement, generic_plans FROM pg_prepared_statements"
    ).fetchall()
    assert prepared and all(generic for _, generic in prepared), prepared


#: R31's shapes: each state set with no other filter, one kind and queue, two of each.
LIST_FILTERS = (
    {},
    {"kinds": ["k"], "queues": ["q1"]},
    {"kinds": ["k", "x"], "queues": ["q0", "q2"]},
)


def test_r31_listing_live_jobs_reads_no_finished_row(crowded, db, clock, harness):
    """Live states are read through the live-rows indexes (R19's rule); a finished state
    through its own index, with a part for R08's lost leases when dead ones are asked."""
    live, leases = harness.index_names["live"], harness.index_names["running"]
    walk = crowded.backend.walk()
    shapes = {
        ("queued",): live,
        ("running",): live,
        ("queued", "running"): live,
        ("done",): harness.index_names["done"],
        ("cancelled",): harness.index_names["cancelled"],
        ("dead",): harness.index_names["dead"] | leases,
    }
    for now, (states, allowed), filters in itertools.product(
        nows(crowded), shapes.items(), LIST_FILTERS
    ):
        stmt = statements.list_jobs(
            now, states, by_kind="kinds" in filters, by_queue="queues" in filters, walk=walk
        )
        params = {"now": clock.now, "after_id": 0, "limit": 100, **filters}
        with db.connect() as conn:
            plan = explain(harness, conn, stmt, params)
        if not {"queued", "running"}.issuperset(states):
            # Finished rows in id order: the planner may walk the primary key and stop at
            # `limit` instead of sorting all of that state's rows from its index.
            allowed = allowed | {PRIMARY_KEY}
        assert plan.indexes and plan.indexes <= allowed, (states, filters, plan)
        assert not plan.full_scan, (states, filters, plan)
