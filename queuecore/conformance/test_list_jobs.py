"""R31: `list_jobs` lists jobs for a person or an operator endpoint: by state, kind and
queue, one value or a list each, in id order after a cursor; R08's lost leases read as
dead. Its plans are checked in test_plans.py."""

from __future__ import annotations

import pytest

from queuecore import Queue


def every_state(queue: Queue, clock) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """One job in each state (two dead: one written, one by R08), in queues a and b."""
    ids = {}
    ids["done"] = queue.enqueue("a", {}, queue="a").id
    queue.complete(queue.claim("w", queues=["a"])[0])
    ids["dead"] = queue.enqueue("b", {}, queue="b").id
    queue.fail(queue.claim("w", queues=["b"])[0], "x", permanent=True)
    ids["cancelled"] = queue.enqueue("a", {}, queue="a").id
    queue.cancel(ids["cancelled"])
    ids["lost"] = queue.enqueue("b", {}, queue="a", max_attempts=1).id
    queue.claim("w", queues=["a"])
    clock.advance(queue.lease_seconds)  # its lease ends on its last attempt: dead (R08)
    ids["running"] = queue.enqueue("a", {}, queue="b").id
    queue.claim("w", queues=["b"])
    ids["queued"] = queue.enqueue("b", {}, queue="a").id
    return ids


def test_r31_list_jobs_filters_by_state_kind_and_queue(queue, clock):
    ids = every_state(queue, clock)
    assert [s.id for s in queue.list_jobs()] == sorted(ids.values())
    for state in ("queued", "running", "done", "cancelled"):
        assert [(s.id, s.state) for s in queue.list_jobs(state=state)] == [(ids[state], state)]
    assert [(s.id, s.state) for s in queue.list_jobs(state="dead")] == [
        (ids["dead"], "dead"),
        (ids["lost"], "dead"),
    ]
    live = queue.list_jobs(state=["queued", "running"])
    assert [s.id for s in live] == [ids["running"], ids["queued"]]
    assert [s.id for s in queue.list_jobs(state=("done", "queued"))] == [
        ids["done"],
        ids["queued"],
    ]
    assert [s.id for s in queue.list_jobs(kind="a", queue="a")] == [ids["done"], ids["cancelled"]]
    assert [s.id for s in queue.list_jobs(kind=["b"], state="dead")] == [ids["dead"], ids["lost"]]
    assert [s.id for s in queue.list_jobs(queue=["b"], state=["dead", "running"])] == [
        ids["dead"],
        ids["running"],
    ]
    assert queue.list_jobs(queue="nowhere") == []


def test_r31_list_jobs_pages_in_id_order_after_a_cursor(queue, clock):
    ids = queue.enqueue_many("k", [{"n": n} for n in range(5)])
    queue.complete(queue.claim("w")[0])
    for state in (None, ["queued", "done"]):
        first = queue.list_jobs(state=state, limit=2)
        second = queue.list_jobs(state=state, after_id=first[-1].id, limit=2)
        rest = queue.list_jobs(state=state, after_id=second[-1].id)
        assert [s.id for s in first + second + rest] == ids
        assert rest[0].payload == {"n": 4}


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"state": "finished"}, ValueError, "state must be one of"),
        ({"state": []}, ValueError, "state must name at least one"),
        ({"kind": []}, ValueError, "kind must name at least one"),
        ({"limit": 0}, ValueError, "limit"),
        ({"after_id": "3"}, TypeError, "job id"),
    ],
)
def test_r31_list_jobs_refuses_bad_filters(queue, arguments, error, match):
    with pytest.raises(error, match=match):
        queue.list_jobs(**arguments)
