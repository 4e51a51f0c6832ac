"""R24: a completion may hand back a result, stored with the completion and nowhere else."""

from __future__ import annotations

import pytest

from queuecore.conformance.helpers import job_row

LEASE = 30


@pytest.mark.parametrize(
    "result",
    [{"total": 3, "items": ["a", "b"]}, [1, 2.5, None], "text é", 42, 0, False, {}],
    ids=repr,
)
def test_r24_complete_stores_any_json_value_and_get_returns_it(queue, result):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    assert queue.get(job.id).result is None  # none while running

    assert queue.complete(job, result=result) is True

    snap = queue.get(job.id)
    assert (snap.state, snap.result) == ("done", result)


def test_r24_no_result_is_none(queue, db):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    assert queue.complete(job)
    assert queue.get(job.id).result is None
    assert job_row(db, job.id)["result"] is None  # SQL NULL, not JSON null


def test_r24_result_is_written_only_when_the_fence_passes(queue, clock, db):
    queue.enqueue("k", {})
    (stale,) = queue.claim("w1")
    clock.advance(LEASE + 1)
    (current,) = queue.claim("w2")

    assert queue.complete(stale, result={"from": "stale"}) is False
    assert job_row(db, current.id)["result"] is None
    assert queue.complete(current, result={"from": "current"}) is True
    assert queue.get(current.id).result == {"from": "current"}


def test_r24_result_commits_with_the_effect_or_not_at_all(queue, db, app_table):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")

    def boom(conn):
        conn.execute(app_table.insert().values(job_id=job.id, note="half"))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        queue.complete(job, effect=boom, result={"n": 1})
    row = job_row(db, job.id)
    assert (row["state"], row["result"], row["lease_token"]) == ("running", None, job.lease_token)

    def note(conn):
        conn.execute(app_table.insert().values(job_id=job.id, note="once"))

    assert queue.complete(job, effect=note, result={"n": 2})
    assert queue.get(job.id).result == {"n": 2}


@pytest.mark.parametrize("bad", [{"a set": {1}}, object(), {"nan": float("nan")}, {1: "x"}])
def test_r24_a_result_that_is_not_json_raises_and_the_job_stays_running(queue, db, bad):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    before = job_row(db, job.id)

    with pytest.raises(TypeError, match="result"):
        queue.complete(job, result=bad)

    assert job_row(db, job.id) == before
    assert queue.heartbeat(job)  # still held under its lease


def test_r24_a_result_over_max_result_bytes_raises_before_anything_is_written(make_queue, db):
    queue = make_queue(max_result_bytes=100)
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    before = job_row(db, job.id)

    with pytest.raises(ValueError, match="max_result_bytes=100"):
        queue.complete(job, result="x" * 99)  # 101 bytes as JSON, quotes included
    with pytest.raises(ValueError, match="max_result_bytes"):
        queue.complete_many([job], results=["x" * 200])

    assert job_row(db, job.id) == before
    assert queue.complete(job, result="x" * 98)  # exactly 100 bytes fits
    assert queue.get(job.id).result == "x" * 98


def test_r24_max_result_bytes_defaults_to_one_mebibyte(queue):
    assert queue.max_result_bytes == 1 << 20
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    with pytest.raises(ValueError, match="max_result_bytes"):
        queue.complete(job, result="x" * (1 << 20))


def test_r24_complete_many_stores_each_jobs_result(queue, clock):
    for i in range(4):
        queue.enqueue("k", {"i": i})
    jobs = queue.claim("w", limit=4)
    stale = jobs[3]
    queue.release(stale)

    outcome = queue.complete_many(jobs, results=[{"i": 0}, None, [2], "three"])

    assert list(outcome) == [True, True, True, False]
    assert [queue.get(j.id).result for j in jobs] == [{"i": 0}, None, [2], None]


def test_r24_complete_many_checks_every_result_before_writing_any(queue, db):
    for i in range(2):
        queue.enqueue("k", {"i": i})
    jobs = queue.claim("w", limit=2)

    with pytest.raises(TypeError, match="result"):
        queue.complete_many(jobs, results=[{"fine": 1}, {"bad": {1, 2}}])
    with pytest.raises(ValueError, match="one entry"):
        queue.complete_many(jobs, results=[{"fine": 1}])

    assert [job_row(db, j.id)["state"] for j in jobs] == ["running", "running"]


def test_r24_complete_many_with_effects_and_results(queue, db, app_table):
    for i in range(3):
        queue.enqueue("k", {"i": i})
    jobs = queue.claim("w", limit=3)

    def note(conn):
        conn.execute(app_table.insert().values(job_id=jobs[0].id, note="ok"))

    def boom(conn):
        raise RuntimeError("boom")

    outcome = queue.complete_many(jobs, effects=[note, boom, None], results=["a", "b", "c"])

    assert list(outcome) == [True, False, True]
    assert [queue.get(j.id).result for j in jobs] == ["a", None, "c"]
    assert job_row(db, jobs[1].id)["state"] == "running"


def test_r24_purge_removes_the_result_with_its_job(queue, clock, db):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    queue.complete(job, result={"big": "x" * 1000})
    clock.advance(100)
    assert queue.purge(older_than=10) == 1
    assert job_row(db, job.id) is None and queue.get(job.id) is None
