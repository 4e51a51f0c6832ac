"""The dashboard's reads go through the partial indexes over live, done or dead rows (or
the primary key), never a scan of the table, on both dialects: a dashboard left open on
a table with 100,000 finished rows reads what the claim reads. Checked on the plans of
the statements as the dashboard sends them (tests/conformance/test_plans.py's way).
The reads that find leases lapsed on their last attempt (dead by R08, the row not yet
written) read running rows only: the leases index, or the live rows' on PostgreSQL,
which can prove that `state = 'running'` implies the index's condition."""

from __future__ import annotations

import itertools

from queuecore.conformance.harness import PRIMARY_KEY, Harness
from queuecore.conformance.test_plans import crowded, explain
from queuecore.dashboard import actions
from queuecore.observe import queries

__all__ = ["crowded"]  # the fixture, found by its name


def expected(harness: Harness) -> dict[str, frozenset[str]]:
    """Per tab, the indexes it may read: running jobs also through the leases index (it
    holds running rows only), the dead tab the lapsed leases beside the dead rows."""
    names = harness.index_names
    return {
        "live": names["running"],
        "queued": names["live"],
        "running": names["running"],
        "done": names["done"],
        "dead": names["dead"] | names["running"],
        "cancelled": names["cancelled"],
    }


def test_every_job_list_reads_its_partial_index(crowded, db, clock, harness):
    """Every tab with every combination of filters and a keyset cursor (in one test: the
    crowded table takes longer to fill than all these plans take to read)."""
    combinations = itertools.product(
        queries.LISTS, [None, "q1"], [None, "k"], [None, (1_699_500_000.0, 50_000)]
    )
    with db.connect() as conn:
        for state, queue_name, kind, after in combinations:
            filters = queries.ListFilter(state=state, queue=queue_name, kind=kind, after=after)
            params = {**queries.list_params(filters), "now": clock.now}
            plan = explain(harness, conn, queries.job_list(filters, 50), params)
            assert plan.indexes and plan.indexes <= expected(harness)[state], (filters, plan)
            if state == "dead":
                assert plan.indexes & harness.index_names["dead"], (filters, plan)
            assert not plan.full_scan, (filters, plan)


def test_overview_reads_live_done_and_dead_indexes_only(crowded, db, clock, harness):
    now = {"now": clock.now}
    with db.connect() as conn:
        live = explain(harness, conn, queries.LIVE_COUNTS, now)
        dead = explain(harness, conn, queries.COUNTED["dead"], {})
        cancelled = explain(harness, conn, queries.COUNTED["cancelled"], {})
        (done_hour,) = (explain(harness, conn, s, now) for s in queries.FINISHED["done"])
        dead_hour, lapsed_hour = (explain(harness, conn, s, now) for s in queries.FINISHED["dead"])
    names = harness.index_names
    for plan, role in (
        (live, "live"),
        (dead, "dead"),
        (cancelled, "cancelled"),
        (done_hour, "done"),
        (dead_hour, "dead"),
        (lapsed_hour, "running"),
    ):
        assert plan.indexes and plan.indexes <= names[role] and not plan.full_scan, (role, plan)


def test_lookups_and_retry_now_read_one_row(crowded, db, clock, harness):
    # A key that exists: MariaDB's planner looks a missing one up in the unique index
    # while planning and then names no index for the plan.
    crowded.enqueue("k", {}, dedupe_key="x")
    with db.connect() as conn:
        dedupe = explain(harness, conn, queries.by_dedupe_key(), {"dedupe_key": "x"})
        retry = explain(harness, conn, actions.RETRY_NOW, {"job_id": 7, "now": clock.now})
    assert dedupe.indexes and not dedupe.full_scan, dedupe
    # By its id; MariaDB's planner may take the few queued rows by state instead.
    assert retry.indexes and retry.indexes <= {PRIMARY_KEY} | harness.index_names["live"], retry
    assert not retry.full_scan, retry
