"""R26: wait returns a job's snapshot once it is terminal, or at the timeout, never spinning."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

import queuecore.executors.waiting
from queuecore.conformance.helpers import all_rows, job_row
from queuecore.sql.schema import jobs


class CountingLooks:
    """Counts how often `wait()` reads the job: a busy loop would read it thousands of times."""

    def __init__(self, queue):
        self.queue, self.looks = queue, 0
        self._get = queue.get

    def __enter__(self):
        def get(job_id):
            self.looks += 1
            return self._get(job_id)

        self.queue.get = get
        return self

    def __exit__(self, *exc):
        del self.queue.get


def test_r26_wait_returns_a_finished_job_at_once(queue):
    done, dead, cancelled = (queue.enqueue("k", {"i": i}).id for i in range(3))
    a, b = queue.claim("w", limit=2)
    queue.complete(a, result={"ok": True})
    queue.fail(b, "bad", permanent=True)
    queue.cancel(cancelled)

    with CountingLooks(queue) as counted:
        states = [queue.wait(i, timeout=30) for i in (done, dead, cancelled)]
    assert [(s.state, s.result) for s in states] == [
        ("done", {"ok": True}),
        ("dead", None),
        ("cancelled", None),
    ]
    assert counted.looks == 3


def test_r26_wait_for_an_unknown_id_is_none(queue):
    assert queue.wait(123_456, timeout=5) is None


def test_r26_wait_returns_the_job_as_it_is_at_the_timeout_without_spinning(queue):
    job_id = queue.enqueue("k", {}).id
    queue.claim("w")

    with CountingLooks(queue) as counted:
        snap = queue.wait(job_id, timeout=1.5)

    assert snap.state == "running"
    # A growing pause: about a dozen looks, not thousands. One is enough when the first
    # look itself ends past the timeout, as on a machine at load 40 (CI of eb88339).
    assert 1 <= counted.looks <= 40
    assert queue.wait(job_id, timeout=0).state == "running"


def test_r26_wait_wakes_when_another_thread_completes_the_job(queue):
    job_id = queue.enqueue("k", {}).id
    (job,) = queue.claim("w")
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(queue.wait(job_id, timeout=60)))
    waiter.start()
    try:
        assert queue.complete(job, result=[1, 2, 3])
    finally:
        waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert [(s.state, s.result) for s in seen] == [("done", [1, 2, 3])]


def test_r26_many_waiters_hold_no_pooled_connection(make_queue):
    """A web app's many clients waiting at once must not drain its pool: with room for
    one connection, five waiters and the completions all get through."""
    queue = make_queue(pool_size=1, max_overflow=0, pool_timeout=5)
    ids = [queue.enqueue("k", {"i": i}).id for i in range(5)]
    claimed = queue.claim("w", limit=5)
    seen = {}
    waiters = [
        threading.Thread(target=lambda i=i: seen.__setitem__(i, queue.wait(i, timeout=60)))
        for i in ids
    ]
    for waiter in waiters:
        waiter.start()
    try:
        assert (
            list(queue.complete_many(claimed, results=[{"i": i} for i in range(5)])) == [True] * 5
        )
    finally:
        for waiter in waiters:
            waiter.join(timeout=30)
    assert not any(waiter.is_alive() for waiter in waiters)
    assert sorted((s.state, s.result["i"]) for s in seen.values()) == [
        ("done", i) for i in range(5)
    ]


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), "5", None], ids=repr)
def test_r26_wait_with_a_negative_or_non_number_timeout_is_a_value_error(queue, db, bad):
    job_id = queue.enqueue("k", {}).id
    before = all_rows(db)
    with pytest.raises(ValueError, match="timeout"):
        queue.wait(job_id, timeout=bad)
    assert all_rows(db) == before


def test_r26_wait_of_an_id_that_is_not_an_integer_is_a_type_error(queue):
    with pytest.raises(TypeError, match="job id"):
        queue.wait("7", timeout=1)


@pytest.mark.requires("listen")
def test_r26_a_backend_that_can_listen_wakes_the_waiter_by_notification(queue, db, monkeypatch):
    """The first pause is made 30 s long: only the notification can end it in time (on
    PostgreSQL, the trigger's NOTIFY)."""
    monkeypatch.setattr(queuecore.executors.waiting, "FIRST_PAUSE", 30.0)
    job_id = queue.enqueue("k", {}).id
    (job,) = queue.claim("w")
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(queue.wait(job_id, timeout=60)))
    waiter.start()
    try:
        for _ in range(200):  # the waiter has marked the job: it listens from now on
            if job_row(db, job_id)["awaited"]:
                break
            threading.Event().wait(0.05)
        assert job_row(db, job_id)["awaited"] is True
        assert queue.complete(job, result="done")
        waiter.join(timeout=15)
        woken = not waiter.is_alive()
    finally:
        waiter.join()  # a waiter that was not woken returns after its 30 s pause
    assert woken, "the NOTIFY did not wake the waiter"
    assert [s.state for s in seen] == ["done"]


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_r26_only_awaited_jobs_send_a_notification(backend, queue, db):
    """The hot path's cost: completing a job nobody waits for sends no NOTIFY (and so
    takes no NOTIFY lock at commit)."""
    _quiet, awaited = (queue.enqueue("k", {"i": i}).id for i in range(2))
    claimed = queue.claim("w", limit=2)
    with db.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == awaited).values(awaited=True))
    with db.connect().execution_options(isolation_level="AUTOCOMMIT") as listener:
        listener.exec_driver_sql("LISTEN queuecore_finished")
        assert queue.complete_many(claimed) == [True, True]
        heard = [
            n.payload
            for n in listener.connection.driver_connection.notifies(timeout=1.0, stop_after=2)
        ]
    assert heard == [str(awaited)]
