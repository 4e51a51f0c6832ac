"""The dashboard's reads on both backends: keyset pages cover a tab exactly once in its
order (ties in finished_at included), and the overview counts what the table holds."""

from __future__ import annotations

import pytest

from queuecore.dashboard import queries


def all_pages(db, filters: queries.ListFilter, size: int) -> list[list[int]]:
    pages = []
    with db.connect() as conn:
        while True:
            page = queries.read_page(conn, filters, size)
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
    pages = all_pages(db, queries.ListFilter(state, queue="a", kind="k"), 10)
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
