"""W5 and R10 under a hard kill: a worker killed between its effect and the commit
leaves neither; the lease hands the job on and the effect lands exactly once."""

from __future__ import annotations

import os
import signal

import queuecore
from tests.faults.actors import create_ledger, write_ledger
from tests.faults.helpers import actor, read_message, rows, wait_until

LEASE = 30.0


def test_w5_kill_9_inside_the_completing_transaction(private_dsn, clock):
    create_ledger(private_dsn)
    queue = queuecore.connect(private_dsn, clock=clock, lease_seconds=LEASE)
    job_id = queue.enqueue("pay", {"amount": 5}).id

    child = actor("complete-and-hang", private_dsn, repr(clock.now))
    assert read_message(child) == {"inside": job_id}
    assert rows(private_dsn, "SELECT * FROM ledger") == []  # not committed yet
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL

    assert rows(private_dsn, "SELECT * FROM ledger") == []
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.finished_at) == ("running", 1, None)
    assert queue.claim("rescuer") == []  # the dead worker's lease still stands

    clock.advance(LEASE)
    # A database server rolls back the killed client's transaction once it sees the
    # connection gone; until then that transaction holds the row, and a claim skips it.
    claimed: list[queuecore.Job] = []
    wait_until(
        lambda: claimed.extend(queue.claim("rescuer")) or claimed,
        "the killed client's transaction has been rolled back",
    )
    (job,) = claimed
    assert (job.id, job.attempts) == (job_id, 2)
    assert queue.complete(job, effect=write_ledger(job.id, "second claim"))
    assert rows(private_dsn, "SELECT job_id, note FROM ledger") == [(job_id, "second claim")]
    assert queue.get(job_id).state == "done"
    queue.close()
