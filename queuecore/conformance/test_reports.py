"""R09 to R14: every report a worker makes about a job (complete, fail, heartbeat, release)
is fenced by the lease token, and does exactly what the contract says to the row."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from queuecore import Job, Queue
from queuecore.conformance.fixtures import FakeClock
from queuecore.conformance.helpers import all_rows, epoch, job_row
from queuecore.sql.schema import jobs


class EffectFailed(Exception):
    """Raised by a test's effect, to be told apart from anything the queue raises."""


DEFAULT_LEASE = 30  # connect()'s default lease_seconds


def replaced(queue: Queue, clock: FakeClock) -> tuple[Job, Job]:
    """A job whose first claim's lease ran out and was taken by a second claim."""
    queue.enqueue("k", {})
    (stale,) = queue.claim("slow")
    clock.advance(DEFAULT_LEASE)
    (current,) = queue.claim("fast")
    return stale, current


def unchanged(db: sa.Engine, report: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The report's answer, after checking that it changed no row at all."""
    before = all_rows(db)
    answer = report(*args, **kwargs)
    assert all_rows(db) == before
    return answer


def test_r09_complete_marks_the_job_done(queue, clock, db):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    clock.advance(3)

    assert queue.complete(job) is True
    row = job_row(db, job.id)
    assert (row["state"], row["finished_at"], row["lease_token"]) == ("done", clock.now, None)
    assert row["attempts"] == 1


def test_r09_stale_complete_is_rejected(queue, clock, db):
    stale, current = replaced(queue, clock)

    assert unchanged(db, queue.complete, stale) is False
    assert queue.complete(current) is True
    assert queue.complete(current) is False  # done already
    forged = dataclasses.replace(current, lease_token="0" * 32)
    assert unchanged(db, queue.complete, forged) is False
    assert job_row(db, current.id)["state"] == "done"


def test_r09_late_complete_nobody_replaced_still_succeeds(queue, clock, db):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    clock.advance(DEFAULT_LEASE * 3)

    assert queue.complete(job) is True
    assert job_row(db, job.id)["state"] == "done"


def test_r10_effect_runs_in_the_completing_transaction_after_the_fence(queue, db, app_table):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    seen = {}

    def effect(conn):
        seen["own"] = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job.id)).scalar()
        seen["outside"] = job_row(db, job.id)["state"]
        conn.execute(app_table.insert().values(job_id=job.id, note="paid"))

    assert queue.complete(job, effect=effect) is True
    assert seen == {"own": "done", "outside": "running"}
    with db.connect() as conn:
        assert conn.execute(sa.select(app_table.c.job_id, app_table.c.note)).all() == [
            (job.id, "paid")
        ]


def test_r10_effect_is_never_called_when_the_fence_fails(queue, clock, db, app_table):
    stale, _current = replaced(queue, clock)
    calls = []

    def effect(conn):
        calls.append(conn)
        conn.execute(app_table.insert().values(job_id=stale.id, note="paid twice"))

    assert queue.complete(stale, effect=effect) is False
    assert calls == []
    assert job_row(db, stale.id)["state"] == "running"


def test_r10_effect_that_raises_rolls_everything_back(queue, clock, db, app_table):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    before = job_row(db, job.id)

    def effect(conn):
        conn.execute(app_table.insert().values(job_id=job.id, note="half"))
        raise EffectFailed("card declined")

    with pytest.raises(EffectFailed, match="card declined"):
        queue.complete(job, effect=effect)

    assert job_row(db, job.id) == before
    assert before["state"] == "running" and before["lease_token"] == job.lease_token
    with db.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(app_table)).scalar() == 0
    assert queue.complete(job) is True  # the lease was kept


def test_r11_fail_with_attempts_left_backs_off_exponentially_up_to_the_cap(make_queue, clock, db):
    queue = make_queue(backoff_base=2.0, backoff_cap=10.0)  # rng pinned to 1.0
    job_id = queue.enqueue("k", {}, max_attempts=6).id

    for attempts in range(1, 6):
        (job,) = queue.claim("w")
        assert job.attempts == attempts
        assert queue.fail(job, f"boom {attempts}") == "queued"
        delay = min(10.0, 2.0 * 2 ** (attempts - 1))
        row = job_row(db, job_id)
        assert (row["state"], row["last_error"], row["lease_token"]) == (
            "queued",
            f"boom {attempts}",
            None,
        )
        assert row["visible_at"] == clock.now + delay
        clock.advance(delay - 0.5)
        assert queue.claim("w") == []
        clock.advance(0.5)


def test_r11_fail_out_of_attempts_makes_the_job_dead(queue, clock, db):
    queue.enqueue("k", {}, max_attempts=1)
    (job,) = queue.claim("w")
    clock.advance(2)

    assert queue.fail(job, "x" * 5000) == "dead"
    row = job_row(db, job.id)
    assert (row["state"], row["finished_at"], row["lease_token"]) == ("dead", clock.now, None)
    assert row["last_error"] == "x" * 2000
    assert queue.claim("w") == []


def test_r11_stale_fail_changes_nothing(queue, clock, db):
    stale, current = replaced(queue, clock)

    assert unchanged(db, queue.fail, stale, "late") is None
    assert unchanged(db, queue.fail, stale, "late", permanent=True) is None

    assert queue.complete(current) is True
    assert queue.fail(current, "after done") is None
    row = job_row(db, current.id)
    assert (row["state"], row["last_error"]) == ("done", None)


def test_r12_permanent_failure_goes_straight_to_dead(queue, clock, db):
    queue.enqueue("k", {}, max_attempts=5)
    (job,) = queue.claim("w")

    assert queue.fail(job, "bad payload", permanent=True) == "dead"
    row = job_row(db, job.id)
    assert (row["state"], row["attempts"], row["last_error"]) == ("dead", 1, "bad payload")
    assert row["finished_at"] == clock.now


def test_r12_retry_in_replaces_the_backoff(make_queue, clock, db):
    queue = make_queue(backoff_base=100.0)
    queue.enqueue("k", {}, max_attempts=2)
    (job,) = queue.claim("w")

    assert queue.fail(job, "rate limited", retry_in=7) == "queued"
    assert job_row(db, job.id)["visible_at"] == clock.now + 7
    clock.advance(7)
    (last,) = queue.claim("w")
    assert queue.fail(last, "rate limited", retry_in=7) == "dead"
    assert job_row(db, job.id)["state"] == "dead"


def test_r13_heartbeat_extends_the_lease(make_queue, clock, db):
    queue = make_queue(lease_seconds=30)
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    clock.advance(20)

    assert queue.heartbeat(job) is True
    assert job_row(db, job.id)["visible_at"] == clock.now + 30
    assert epoch(job.lease_expires_at) == clock.now + 30
    clock.advance(29)
    assert queue.claim("other") == []  # the first lease would have ended 19 s ago
    assert queue.complete(job) is True


def test_r13_heartbeat_of_a_lost_job_returns_false(queue, clock, db):
    stale, current = replaced(queue, clock)

    assert unchanged(db, queue.heartbeat, stale) is False
    assert queue.complete(current) is True
    assert queue.heartbeat(current) is False


def test_r14_release_gives_the_job_back_unrun(queue, clock, db):
    queue.enqueue("k", {}, max_attempts=1)
    (job,) = queue.claim("w")
    clock.advance(4)

    assert queue.release(job) is True
    row = job_row(db, job.id)
    assert (row["state"], row["attempts"], row["lease_token"]) == ("queued", 0, None)
    assert row["visible_at"] == clock.now
    (again,) = queue.claim("w")  # its only attempt was not spent
    assert (again.id, again.attempts) == (job.id, 1)


def test_r14_stale_release_changes_nothing(queue, clock, db):
    stale, _current = replaced(queue, clock)

    assert unchanged(db, queue.release, stale) is False
