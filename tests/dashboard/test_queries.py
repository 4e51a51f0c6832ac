"""The dashboard's reads on both backends: keyset pages cover a tab exactly once in its
order (ties in finished_at included), and the overview counts what the table holds, as
every read must see it (R08: a lease that ended on the last attempt is dead)."""

from __future__ import annotations

import pytest

from queuecore.conformance.fixtures import START
from queuecore.observe import queries
from queuecore.sql.statements import LEASE_EXPIRED_ON_LAST_ATTEMPT


def all_pages(db, filters: queries.ListFilter, size: int, now: float) -> list[list[int]]:
    pages = []
    with db.connect() as conn:
        while True:
            page = queries.read_page(conn, filters, size, now)
            pages.append([row.id for row in page.rows])
            if page.next_after is None:
                return pages
            filters = queries.ListFilter(
                filters.state, filters.queue, filters.kind, page.next_after
            )


@pytest.mark.parametrize("state", ["live", "done"])
def test_keyset_pages_cover_a_tab_once_newest_first(queue, db, clock, state):
    ids = queue.enqueue_many("k", [{"n": i} for i in range(23)], queue="a")
    queue.enqueue_many("other", [{}] * 3, queue="b")
    if state == "done":
        for job in queue.claim("w", limit=23, queues=["a"]):  # all finish at one instant
            assert queue.complete(job)
    pages = all_pages(db, queries.ListFilter(state, queue="a", kind="k"), 10, clock.now)
    assert [len(p) for p in pages] == [10, 10, 3]
    assert [i for page in pages for i in page] == sorted(ids, reverse=True)


def test_overview_counts_by_queue_kind_and_state(queue, db, clock):
    queue.enqueue_many("a", [{}] * 4, queue="q1")
    queue.enqueue("b", {}, queue="q1", delay=60)
    queue.enqueue_many("a", [{}] * 2, queue="q2")
    first, second, _still_running = queue.claim("w", limit=3, queues=["q1"])
    queue.complete(first)
    queue.fail(second, "boom", permanent=True)
    clock.advance(20)  # within the running job's lease (30 s): it is not ready
    with db.connect() as conn:
        overview = queries.read_overview(conn, clock.now)
    q1, q2 = overview.queues
    assert (q1.name, q1.queued, q1.running, q1.ready, q1.dead) == ("q1", 2, 1, 1, 1)
    assert (q1.done_last_hour, q1.dead_last_hour, q1.oldest_ready_age) == (1, 1, 20.0)
    assert (q2.name, q2.queued, q2.ready, q2.dead) == ("q2", 2, 2, 0)
    assert overview.by_kind == {
        ("q1", "a", "queued"): 1,
        ("q1", "b", "queued"): 1,
        ("q1", "a", "running"): 1,
        ("q1", "a", "dead"): 1,
        ("q2", "a", "queued"): 2,
    }
    assert sum(overview.per_minute["done"]) == 1 and overview.per_minute["done"][-1] == 1
    assert sum(overview.per_minute["dead"]) == 1
    clock.advance(3600)  # an hour later, nothing finished in the last hour
    with db.connect() as conn:
        later = queries.read_overview(conn, clock.now)
    assert sum(later.per_minute["done"]) == 0 and later.queues[0].done_last_hour == 0


def lapse_and_fail(make_queue, clock) -> dict[str, int]:
    """Two last-attempt leases that end at START + 30 unreported (their rows still say
    running), and three jobs failed for good at START + 20, + 40 and + 40."""
    queue = make_queue()  # 30 s leases
    patient = make_queue(lease_seconds=100)
    ids = {}
    for name in ("x1", "x2"):
        ids[name] = queue.enqueue("k", {}, queue="lapse", max_attempts=1).id
    for name in ("y1", "y2", "y3"):
        ids[name] = queue.enqueue("k", {}, queue="fail", max_attempts=1).id
    assert len(queue.claim("w", limit=2, queues=["lapse"])) == 2
    y1, y2, y3 = patient.claim("w", limit=3, queues=["fail"])
    clock.advance(20)
    assert patient.fail(y1, "boom", permanent=True) == "dead"
    clock.advance(20)
    assert patient.fail(y2, "boom", permanent=True) == "dead"
    assert patient.fail(y3, "boom", permanent=True) == "dead"
    return ids


def test_a_lapsed_last_attempt_lease_is_listed_and_counted_dead(make_queue, db, clock):
    ids = lapse_and_fail(make_queue, clock)
    lapsed = {ids["x1"], ids["x2"]}
    with db.connect() as conn:
        running = queries.read_page(conn, queries.ListFilter("running"), 50, clock.now)
        live = queries.read_page(conn, queries.ListFilter("live"), 50, clock.now)
        dead = queries.read_page(conn, queries.ListFilter("dead", queue="lapse"), 50, clock.now)
        overview = queries.read_overview(conn, clock.now)
    assert running.rows == [] and live.rows == []
    assert [row.id for row in dead.rows] == sorted(lapsed, reverse=True)
    for row in dead.rows:  # as `get` shows it, the row itself unwritten
        assert (row.state, row.finished_at) == ("dead", START + 30)
        assert row.last_error == LEASE_EXPIRED_ON_LAST_ATTEMPT
    fail, lapse = overview.queues
    assert (lapse.name, lapse.running, lapse.dead, lapse.dead_last_hour) == ("lapse", 0, 2, 2)
    assert (fail.name, fail.running, fail.dead, fail.dead_last_hour) == ("fail", 0, 3, 3)
    assert overview.by_kind == {("lapse", "k", "dead"): 2, ("fail", "k", "dead"): 3}
    assert sum(overview.per_minute["dead"]) == 5
    queue = make_queue()
    assert {queue.get(i).state for i in lapsed} == {"dead"}


def test_dead_pages_merge_dead_rows_and_lapsed_leases_in_finish_order(make_queue, db, clock):
    """Newest first by (finished_at, id) across both parts, a page boundary in a tie."""
    ids = lapse_and_fail(make_queue, clock)
    expected = [ids[name] for name in ("y3", "y2", "x2", "x1", "y1")]
    pages = all_pages(db, queries.ListFilter("dead"), 2, clock.now)
    assert pages == [expected[:2], expected[2:4], expected[4:]]
