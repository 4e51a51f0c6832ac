"""R33: each worker keeps a record of itself; `workers()` lists them, a worker not seen
for three heartbeats as gone, and none not seen for an hour."""

from __future__ import annotations

from queuecore.job import to_datetime

RECORD = {
    "host": "web-1",
    "pid": 4242,
    "queues": ["mail", "reports"],
    "kinds": ["email"],
    "concurrency": 4,
    "heartbeat_seconds": 10.0,
    "running": 0,
}


def test_r33_a_worker_appears_is_seen_then_gone_then_pruned(queue, clock):
    assert queue.workers() == []
    started = to_datetime(clock.now)
    queue.report_worker("w-1", RECORD)
    queue.report_worker("w-2", {**RECORD, "queues": None, "kinds": ["a", "b"]})
    clock.advance(10)
    queue.report_worker("w-1", {**RECORD, "running": 3})  # its heartbeat
    first, second = queue.workers()
    assert (first.name, first.host, first.pid, first.queues, first.kinds) == (
        "w-1",
        "web-1",
        4242,
        ["mail", "reports"],
        ["email"],
    )
    assert (first.concurrency, first.running, first.started_at) == (4, 3, started)
    assert first.last_seen_at == to_datetime(clock.now) and not first.gone
    assert (second.name, second.queues, second.kinds, second.gone) == (
        "w-2",
        None,
        ["a", "b"],
        False,
    )
    clock.advance(21)  # w-2 was last seen 31 s ago: three heartbeats missed
    assert [(w.name, w.gone) for w in queue.workers()] == [("w-1", False), ("w-2", True)]
    clock.advance(3600)
    assert queue.workers() == []  # both gone for an hour: no longer listed
    queue.report_worker("w-3", RECORD)  # a start prunes them
    assert [w.name for w in queue.workers()] == ["w-3"]
    queue.forget_worker("w-3")  # a clean stop
    assert queue.workers() == []
