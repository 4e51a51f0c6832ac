"""R25: cancel turns a queued or running job into the terminal state `cancelled`."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queuecore.conformance.helpers import all_rows, job_row

LEASE = 30


def test_r25_cancel_a_queued_or_delayed_job(queue, clock, db):
    ready = queue.enqueue("k", {}).id
    later = queue.enqueue("k", {}, delay=3600).id
    other = queue.enqueue("k", {}).id

    assert queue.cancel(ready) is True
    assert queue.cancel(later) is True

    for job_id in (ready, later):
        row = job_row(db, job_id)
        assert (row["state"], row["finished_at"], row["lease_token"]) == (
            "cancelled",
            clock.now,
            None,
        )
    (claimed,) = queue.claim("w", limit=10)
    assert claimed.id == other and queue.complete(claimed)
    clock.advance(7200)  # the delayed one would be ready by now
    assert queue.claim("w", limit=10) == []


def test_r25_cancel_a_running_job_fences_its_holder_off(queue, db, app_table):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")

    assert queue.cancel(job.id) is True
    cancelled = job_row(db, job.id)
    assert cancelled["state"] == "cancelled"

    called = []
    assert queue.heartbeat(job) is False  # the worker sets current_lease().lost on this
    assert queue.complete(job, effect=lambda conn: called.append(conn)) is False
    assert queue.complete(job, result={"x": 1}) is False
    assert queue.fail(job, "late") is None
    assert queue.fail(job, "late", permanent=True) is None
    assert queue.release(job) is False
    assert queue.complete_many([job]) == [False]
    assert called == []
    assert job_row(db, job.id) == cancelled


def test_r25_cancel_refuses_finished_and_unknown_jobs(queue, clock, db):
    done = queue.enqueue("k", {}).id
    dead = queue.enqueue("k", {}).id
    twice = queue.enqueue("k", {}).id
    a, b = queue.claim("w", limit=2)
    queue.complete(a)
    queue.fail(b, "bad", permanent=True)
    assert queue.cancel(twice)
    before = all_rows(db)

    assert [queue.cancel(i) for i in (done, dead, twice, 999_999)] == [False] * 4
    assert all_rows(db) == before


def test_r25_a_lease_that_ran_out_on_the_last_attempt_is_dead_not_cancellable(queue, clock, db):
    job_id = queue.enqueue("k", {}, max_attempts=1).id
    queue.claim("w")
    clock.advance(LEASE + 1)

    assert queue.cancel(job_id) is False
    assert queue.get(job_id).state in ("dead", "running")  # dead by R08, however stored
    assert job_row(db, job_id)["state"] != "cancelled"


def test_r25_stats_count_cancelled_per_queue(queue):
    for name in ("a", "a", "b"):
        queue.cancel(queue.enqueue("k", {}, queue=name).id)
    queue.enqueue("k", {}, queue="a")

    stats = queue.stats()
    assert stats["cancelled"] == 3 and stats["queued"] == 1
    assert stats["queues"]["a"]["cancelled"] == 2
    assert queue.stats(queue="b")["cancelled"] == 1


def test_r25_purge_accepts_cancelled_and_requeue_dead_never_touches_it(queue, clock, db):
    cancelled = queue.enqueue("k", {}).id
    dead = queue.enqueue("k", {}).id
    queue.cancel(cancelled)
    (job,) = queue.claim("w")
    queue.fail(job, "bad", permanent=True)

    assert queue.requeue_dead() == [dead]
    assert queue.requeue_dead([cancelled]) == []
    assert job_row(db, cancelled)["state"] == "cancelled"

    clock.advance(100)
    assert queue.purge(older_than=10) == 0  # done only, by default
    assert queue.purge(older_than=10, states=("cancelled",)) == 1
    assert job_row(db, cancelled) is None and job_row(db, dead) is not None


@pytest.mark.parametrize("bad", ["1", 1.0, None, True, [1]], ids=repr)
def test_r25_cancel_of_an_id_that_is_not_an_integer_is_a_type_error(queue, db, bad):
    job_id = queue.enqueue("k", {}).id
    before = all_rows(db)
    with pytest.raises(TypeError, match="job id"):
        queue.cancel(bad)
    assert all_rows(db) == before
    assert job_row(db, job_id)["state"] == "queued"


def test_r25_the_database_refuses_an_unknown_state(db):
    """The CHECK of migration 0003 knows `cancelled` and still refuses anything else."""
    from queuecore.sql.schema import jobs

    row = {
        "kind": "k",
        "queue": "q",
        "payload": {},
        "priority": 0,
        "attempts": 0,
        "max_attempts": 1,
        "visible_at": 0.0,
        "created_at": 0.0,
    }
    with db.begin() as conn:
        conn.execute(jobs.insert().values(**row, state="cancelled"))
    # An IntegrityError on SQLite and PostgreSQL; mysqlclient files MariaDB's failed
    # CHECK (error 4025) as an OperationalError. Each names the constraint.
    refused = (sa.exc.IntegrityError, sa.exc.OperationalError)
    with pytest.raises(refused, match="ck_queuecore_jobs_state"), db.begin() as conn:
        conn.execute(jobs.insert().values(**row, state="paused"))
