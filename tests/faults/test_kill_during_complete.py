"""W5 and R10 under a hard kill: a worker killed between its effect and the commit
leaves neither; the lease hands the job on and the effect lands exactly once."""

from __future__ import annotations

import os
import signal
import uuid

import sqlalchemy as sa

import queuecore
from tests.faults.actors import create_ledger, write_ledger
from tests.faults.helpers import actor, read_message, rows, scalar, wait_until

LEASE = 30.0


def test_w5_kill_9_inside_the_completing_transaction(backend, private_dsn, clock):
    create_ledger(private_dsn)
    queue = queuecore.connect(private_dsn, clock=clock, lease_seconds=LEASE)
    job_id = queue.enqueue("pay", {"amount": 5}).id
    child_dsn = private_dsn
    if backend == "postgresql":
        # Named, so the test can tell when the server has noticed the death.
        name = f"doomed-{uuid.uuid4().hex[:8]}"
        child_dsn = sa.make_url(private_dsn).update_query_dict({"application_name": name})
        child_dsn = child_dsn.render_as_string(hide_password=False)

    child = actor("complete-and-hang", child_dsn, repr(clock.now))
    assert read_message(child) == {"inside": job_id}
    assert rows(private_dsn, "SELECT * FROM ledger") == []  # not committed yet
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    if backend == "postgresql":
        wait_until(
            lambda: (
                not scalar(
                    private_dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name",
                    name=name,
                )
            ),
            "the server has rolled back the killed client's transaction",
        )

    assert rows(private_dsn, "SELECT * FROM ledger") == []
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.finished_at) == ("running", 1, None)
    assert queue.claim("rescuer") == []  # the dead worker's lease still stands

    clock.advance(LEASE)
    (job,) = queue.claim("rescuer")
    assert (job.id, job.attempts) == (job_id, 2)
    assert queue.complete(job, effect=write_ledger(job.id, "second claim"))
    assert rows(private_dsn, "SELECT job_id, note FROM ledger") == [(job_id, "second claim")]
    assert queue.get(job_id).state == "done"
    queue.close()
