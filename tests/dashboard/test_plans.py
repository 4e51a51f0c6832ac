"""The dashboard's reads go through the partial indexes over live, done or dead rows (or
the primary key), never a scan of the table, on both dialects: a dashboard left open on
a table with 100,000 finished rows reads what the claim reads. Checked on the plans of
the statements as the dashboard sends them (tests/conformance/test_plans.py's way).
The reads that find leases lapsed on their last attempt (dead by R08, the row not yet
written) read running rows only: the leases index, or the live rows' on PostgreSQL,
which can prove that `state = 'running'` implies the index's condition."""

from __future__ import annotations

import itertools

from queuecore.conformance.test_plans import DEAD, LEASES, PRIMARY_KEY, READY, crowded, explain
from queuecore.dashboard import actions, queries

__all__ = ["crowded"]  # the fixture, found by its name

DONE = "ix_queuecore_jobs_done"
CANCELLED = "ix_queuecore_jobs_cancelled"
RUNNING_ROWS = READY | {LEASES}
# Running jobs may also be read through the leases index: it holds running rows only.
EXPECTED = {
    "live": RUNNING_ROWS,
    "queued": READY,
    "running": RUNNING_ROWS,
    "done": {DONE},
    "dead": {DEAD} | RUNNING_ROWS,  # the dead rows, and the lapsed leases
    "cancelled": {CANCELLED},
}


def test_every_job_list_reads_its_partial_index(crowded, db, clock):
    """Every tab with every combination of filters and a keyset cursor (in one test: the
    crowded table takes longer to fill than all these plans take to read)."""
    combinations = itertools.product(
        queries.LISTS, [None, "q1"], [None, "k"], [None, (1_699_500_000.0, 50_000)]
    )
    with db.connect() as conn:
        for state, queue_name, kind, after in combinations:
            filters = queries.ListFilter(state=state, queue=queue_name, kind=kind, after=after)
            params = {**queries.list_params(filters), "now": clock.now}
            plan = explain(conn, queries.job_list(filters, 50), params)
            assert plan.indexes and plan.indexes <= EXPECTED[state], (filters, plan)
            if state == "dead":
                assert DEAD in plan.indexes and plan.indexes & RUNNING_ROWS, (filters, plan)
            assert not plan.full_scan, (filters, plan)


def test_overview_reads_live_done_and_dead_indexes_only(crowded, db, clock):
    with db.connect() as conn:
        live = explain(conn, queries.LIVE_COUNTS, {"now": clock.now})
        dead = explain(conn, queries.COUNTED["dead"], {})
        cancelled = explain(conn, queries.COUNTED["cancelled"], {})
        (done_hour,) = (explain(conn, s, {"now": clock.now}) for s in queries.FINISHED["done"])
        dead_hour, lapsed_hour = (
            explain(conn, s, {"now": clock.now}) for s in queries.FINISHED["dead"]
        )
    assert live.indexes and live.indexes <= READY and not live.full_scan, live
    assert dead.indexes == {DEAD} and not dead.full_scan, dead
    assert cancelled.indexes == {CANCELLED} and not cancelled.full_scan, cancelled
    assert done_hour.indexes == {DONE} and not done_hour.full_scan, done_hour
    assert dead_hour.indexes == {DEAD} and not dead_hour.full_scan, dead_hour
    assert lapsed_hour.indexes and lapsed_hour.indexes <= RUNNING_ROWS, lapsed_hour
    assert not lapsed_hour.full_scan, lapsed_hour


def test_lookups_and_retry_now_read_one_row(crowded, db, clock):
    with db.connect() as conn:
        dedupe = explain(conn, queries.by_dedupe_key(), {"dedupe_key": "x"})
        retry = explain(conn, actions.RETRY_NOW, {"job_id": 7, "now": clock.now})
    assert dedupe.indexes and not dedupe.full_scan, dedupe
    assert retry.indexes == {PRIMARY_KEY} and not retry.full_scan, retry
