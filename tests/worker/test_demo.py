"""`queuecore demo`, the README's first command, ends in PASS (smaller and faster here)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queuecore.demo.jobs import ledger
from queuecore.demo.verdict import outcomes
from queuecore.sql.schema import jobs
from tests.worker.processes import run_queuecore

# A kill about every 3 s: at 1.5 s, on a loaded machine where a worker took up to 7 s to
# start (CI of 27ac1bd), a `slow` job (1.5 leases of work) met a kill on each of its 8
# attempts, and the demo rightly said FAIL. Its subject here is the demo's end to end.
SMALLER = ("--jobs", "60", "--workers", "3", "--lease-seconds", "1", "--kill-every", "3")


@pytest.mark.slow
def test_the_demo_passes_and_exits_0(backend, request):
    # On SQLite exactly as the README has it: the demo makes its own database file.
    where = () if backend == "sqlite" else ("--dsn", request.getfixturevalue("dsn"))
    done = run_queuecore("demo", *SMALLER, *where, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("VERDICT: PASS"), done.stdout
    for kind in ("ordinary", "flaky", "slow", "stall", "poison", "hopeless"):
        assert f"\n{kind} " in done.stdout  # one verdict row per kind


def test_the_verdict_counts_a_lease_lost_on_the_last_attempt_as_dead(make_queue, clock):
    # The run ends once the stats (which apply R08) say nothing is left; no claim may
    # have written that job dead by then, so the verdict must read it as the queue does.
    queue = make_queue()
    ledger.create(queue.engine, checkfirst=True)
    job_id = queue.enqueue("poison", {}, queue="demo-verdict", max_attempts=1).id
    assert [job.id for job in queue.claim("w", queues=["demo-verdict"])] == [job_id]
    clock.advance(queue.lease_seconds + 1)
    assert queue.stats("demo-verdict")["running"] == 0
    with queue.engine.connect() as conn:  # the row itself still says running
        state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job_id)).scalar_one()
    assert state == "running"
    assert outcomes(queue, "demo-verdict") == [
        {
            "id": job_id,
            "kind": "poison",
            "state": "dead",
            "attempts": 1,
            "max_attempts": 1,
            "ledger": 0,
        }
    ]
