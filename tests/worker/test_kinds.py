"""W2 with real `queuecore worker` processes: a worker never claims a kind its registry
has no handler for, so a job of a new kind waits through a rolling deploy (or beside
another application) until a worker that knows it runs it."""

from __future__ import annotations

import json

import sqlalchemy as sa

from queuecore.demo.jobs import ledger
from tests.worker.processes import run_queuecore


def test_w2_a_worker_leaves_unknown_kinds_to_a_worker_that_knows_them(make_queue, dsn):
    queue = make_queue(clock=None)
    ledger.create(queue.engine, checkfirst=True)
    with queue.engine.begin() as conn:
        conn.execute(ledger.delete().where(ledger.c.queue == "kinds"))
    reports = queue.enqueue_many("sales_report", [{}] * 5, queue="kinds", priority=-1)
    ticks = queue.enqueue_many("quick", [{}] * 3, queue="kinds")
    idle = ("--queues", "kinds", "--exit-when-idle", "1", "--dsn", dsn)

    first = run_queuecore("worker", "tests.worker.handlers:REGISTRY", *idle)
    assert first.returncode == 0, first.stderr
    assert [queue.get(i).state for i in ticks] == ["done"] * 3
    for job_id in reports:  # never claimed: no attempt spent, no error, no worker
        snap = queue.get(job_id)
        assert (snap.state, snap.attempts, snap.last_error, snap.worker) == (
            "queued",
            0,
            None,
            None,
        )
    stats = run_queuecore("stats", "--json", "--dsn", dsn)
    assert json.loads(stats.stdout)["kinds"]["sales_report"]["ready_now"] == 5

    second = run_queuecore("worker", "tests.worker.handlers:REPORTS", *idle)
    assert second.returncode == 0, second.stderr
    assert [(queue.get(i).state, queue.get(i).attempts) for i in reports] == [("done", 1)] * 5
    with queue.engine.connect() as conn:
        rows = conn.execute(sa.select(ledger.c.job_id).where(ledger.c.queue == "kinds"))
        assert sorted(rows.scalars()) == reports  # each effect once
