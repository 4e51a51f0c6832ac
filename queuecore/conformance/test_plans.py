"""R19 (and R16's "never scans finished rows"): the hot statements read partial indexes
over live rows, so their cost does not grow with the finished rows. Checked on the
query plans of the real statements from `queuecore.statements`, never on timings."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Double, bindparam
from sqlalchemy.sql.elements import ColumnElement

from queuecore import statements
from queuecore.conformance.fixtures import FakeClock
from queuecore.schema import jobs
from queuecore.sqlqueue import SQLQueue

FINISHED_ROWS = 100_000
READY = {"ix_queuecore_jobs_ready", "ix_queuecore_jobs_ready_by_queue"}
LEASES = "ix_queuecore_jobs_leases"
DEAD = "ix_queuecore_jobs_dead"
CANCELLED = "ix_queuecore_jobs_cancelled"
PRIMARY_KEY = "primary key"
KINDS = (None, 1, 2)  # R23: no kinds filter, one kind, two


@dataclass(frozen=True)
class Plan:
    indexes: frozenset[str]  # every index the plan reads the jobs table through
    full_scan: bool  # the jobs table is read row by row
    sorts: bool  # results are sorted after reading, instead of read in index order


def explain(conn: sa.Connection, stmt: sa.Executable, params: dict[str, Any]) -> Plan:
    """The plan of the statement as the queue sends it: compiled for this dialect, with
    bound parameters (the state names are the only literals, as in the real statements)."""
    compiled = stmt.compile(dialect=conn.dialect)
    sent = compiled.construct_expanded_state(params)
    if compiled.positional:
        return explain_sent(conn, sent.statement, tuple(sent.positional_parameters))
    return explain_sent(conn, sent.statement, sent.parameters)


def explain_sent(conn: sa.Connection, sql: str, parameters: Any) -> Plan:
    """The plan of SQL text with the driver's parameters, as the hot path sends them."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters).all()
        details = [row.detail for row in rows]
        indexes = {
            PRIMARY_KEY if found == "INTEGER PRIMARY KEY" else found.split()[-1]
            for detail in details
            for found in re.findall(r"USING (INTEGER PRIMARY KEY|(?:COVERING )?INDEX \w+)", detail)
        }
        return Plan(
            indexes=frozenset(indexes),
            full_scan=any(re.fullmatch(rf"SCAN {jobs.name}", d) for d in details),
            sorts=any("TEMP B-TREE FOR ORDER BY" in d for d in details),
        )
    (document,) = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {sql}", parameters).scalar()
    nodes = list(walk(document["Plan"]))
    indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
    return Plan(
        indexes=frozenset(PRIMARY_KEY if i == f"{jobs.name}_pkey" else i for i in indexes),
        full_scan=any(
            n["Node Type"] == "Seq Scan" and n.get("Relation Name") == jobs.name for n in nodes
        ),
        sorts=any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes),
    )


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from walk(child)


def nows(queue: SQLQueue) -> list[ColumnElement[float]]:
    """The time expressions the queue's statements are built with: a bound parameter for
    an injected (or local) clock, and the server's clock where that is the default."""
    found = [bindparam("now", type_=Double)]
    server = queue.backend.server_now()  # the backend's hook for its default clock
    if server is not None:
        found.append(server)
    return found


@pytest.fixture
def crowded(queue: SQLQueue, db: sa.Engine, clock: FakeClock) -> SQLQueue:
    """100,000 finished rows (every 50th dead) in the same queues as a few live ones."""
    n = sa.select(sa.literal(1).label("i")).cte("n", recursive=True)
    n = n.union_all(sa.select(n.c.i + 1).where(n.c.i < FINISHED_ROWS))
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
        conn.exec_driver_sql(f"ANALYZE {jobs.name}")
    return queue


@pytest.mark.parametrize("clock_source", ["injected", "default"])
def test_r19_every_claim_shape_reads_the_ready_index(
    crowded, make_queue, db, clock, backend, clock_source
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
        steps = queue.ops.claim_plan(one, queue_count, kind_count).steps
        with db.connect() as conn:
            plans = [explain_sent(conn, step.sql, step.parameters(params)) for step in steps]
        if one:
            assert len(steps) == 1, [step.sql for step in steps]
        for plan in plans:
            assert plan.indexes and plan.indexes <= READY | {PRIMARY_KEY}, plan
            assert not plan.full_scan, plan
        # The claim and its order read the ready index; SQLite's plan is fixed by its
        # statistics, PostgreSQL may choose to sort the few live rows of named queues.
        picking = [plan for plan in plans if plan.indexes & READY]
        assert picking and (backend == "postgresql" or not any(p.sorts for p in picking))


def test_r08_reads_of_lost_leases_use_the_partial_indexes(crowded, db, clock):
    """What finds the running rows that are dead by R08 reads the leases index, beside
    the dead index for the dead list: none of it walks the finished rows. For one queue,
    the planner may take the live rows by queue instead (measured on PostgreSQL once its
    statistics had seen the crowd): that index holds no finished row either."""
    params = {"now": clock.now, "limit": 10, "queue": "q1", "job_id": 1}
    for now in nows(crowded):
        with db.connect() as conn:
            retire = explain(conn, statements.retire(now), params)
            listed = [
                explain(conn, statements.dead_jobs(now, by_queue=by_queue), params)
                for by_queue in (False, True)
            ]
            got = explain(conn, statements.get(now), params)
        assert LEASES in retire.indexes and not retire.full_scan, retire
        everywhere, by_queue = listed
        assert everywhere.indexes <= {DEAD, LEASES} and LEASES in everywhere.indexes, everywhere
        live = {LEASES, *READY}
        assert by_queue.indexes <= {DEAD, *live} and by_queue.indexes & live, by_queue
        for plan in listed:
            assert not plan.full_scan, plan
        assert got.indexes == {PRIMARY_KEY} and not got.full_scan, got


def test_r16_stats_never_scans_finished_rows(crowded, db, clock):
    for now in nows(crowded):
        with db.connect() as conn:
            live = explain(conn, statements.live_counts(now), {"now": clock.now})
            dead = explain(conn, statements.dead_counts(), {})

        assert live.indexes and live.indexes <= READY and not live.full_scan, live
        assert dead.indexes == {DEAD} and not dead.full_scan, dead
    with db.connect() as conn:
        cancelled = explain(conn, statements.cancelled_counts(), {})
    assert cancelled.indexes == {CANCELLED} and not cancelled.full_scan, cancelled


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])  # a plan cache is PostgreSQL's alone
@pytest.mark.parametrize("clock_source", ["injected", "default"])
def test_one_job_claim_keeps_one_plan_on_postgresql(make_queue, db, backend, clock_source):
    """The driver prepares a statement it runs often; the server then plans it once, unless
    a generic plan looks dearer than planning each call. A one-job claim must not look so
    (a bound LIMIT did): re-planning it on every claim cost more CPU than running it."""
    # Enough ready rows that a generic plan priced at a tenth of them looks dear; enqueued
    # by another queue, so this one's connection holds only what a claim prepared.
    make_queue().enqueue_many("k", [{}] * 10_000)
    with db.begin() as conn:
        conn.exec_driver_sql(f"ANALYZE {jobs.name}")
    queue = make_queue() if clock_source == "injected" else make_queue(clock=None)
    for _ in range(20):
        [job] = queue.claim("w")
        assert queue.complete(job)
    _, driver = queue.hot.connection()
    prepared = driver.execute(
        "SELECT statement, generic_plans FROM pg_prepared_statements"
    ).fetchall()
    assert prepared and all(generic for _, generic in prepared), prepared
