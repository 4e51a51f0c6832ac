"""R20 and R21: where the queue reads time and randomness from.

The fake clock starts in 2023, years behind the machine's and the server's clocks, so
any statement that read a real clock instead of the injected one would be caught.
"""

from __future__ import annotations

from queuecore.conformance.helpers import capture_sql, epoch, job_row

REAL_CLOCKS = ("clock_timestamp", "now()", "current_timestamp", "julianday", "unixepoch")


def test_r20_an_injected_clock_is_the_only_time_read(make_queue, clock, db):
    queue = make_queue(lease_seconds=30)
    start = clock.now
    with capture_sql() as sent:
        job_id = queue.enqueue("k", {}, delay=10).id
        assert queue.claim("w") == []  # real time is years later; the clock says not yet
        clock.advance(10)
        (job,) = queue.claim("w")
        assert epoch(job.lease_expires_at) == start + 40
        clock.advance(5)
        assert queue.heartbeat(job) is True
        assert epoch(job.lease_expires_at) == start + 45
        assert queue.stats()["oldest_ready_age_s"] == 0.0
        clock.advance(1)
        assert queue.complete(job) is True

    row = job_row(db, job_id)
    assert (row["created_at"], row["visible_at"], row["finished_at"]) == (
        start,
        start + 45,
        start + 16,
    )
    sql = "\n".join(statement.lower() for statement, _ in sent)
    assert not [word for word in REAL_CLOCKS if word in sql]


def test_r20_default_clock_is_the_server_where_the_backend_has_one(make_queue, harness, db):
    """PostgreSQL's harness says its statements read `clock_timestamp()`; SQLite's default
    clock is the local one."""
    queue = make_queue(clock=None, lease_seconds=30)
    with capture_sql() as sent:
        before = harness.server_now(db)
        later = queue.enqueue("k", {}, delay=100).id
        ready = queue.enqueue("k", {}).id
        (job,) = queue.claim("w")
        after = harness.server_now(db)

    assert job.id == ready
    row = job_row(db, later)
    assert before <= row["created_at"] <= after
    assert before + 100 <= row["visible_at"] <= after + 100
    assert before + 30 <= epoch(job.lease_expires_at) <= after + 30
    # Every statement that writes a job (PostgreSQL's hot path sends its INSERT inside a
    # WITH that also notifies, so not every one starts with INSERT).
    inserts = [(sql, params) for sql, params in sent if "INSERT INTO queuecore_jobs" in sql]
    assert len(inserts) == 2, sent
    clock_sql = harness.server_clock_sql
    if clock_sql is not None:
        # Computed by the server from its own clock: the client sends no time at all.
        assert all(clock_sql in sql and "now" not in params for sql, params in inserts)
    else:
        assert not any(word in sql.lower() for sql, _ in inserts for word in REAL_CLOCKS)


def test_r21_the_injected_random_source_draws_the_jitter(make_queue, clock, db):
    draws = []

    def rng():
        draws.append(0.25)
        return 0.25

    queue = make_queue(rng=rng, backoff_base=4.0, backoff_cap=60.0)
    job_id = queue.enqueue("k", {}).id
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom") == "queued"
    assert job_row(db, job_id)["visible_at"] == clock.now + 0.25 * 4.0
    clock.advance(1)
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom") == "queued"
    assert job_row(db, job_id)["visible_at"] == clock.now + 0.25 * 8.0
    assert len(draws) == 2


def test_r21_the_default_random_source_stays_under_the_ceiling(make_queue, clock, db):
    queue = make_queue(rng=None, backoff_base=8.0)
    ids = queue.enqueue_many("k", [{}] * 20)
    for job in queue.claim("w", limit=20):
        queue.fail(job, "boom")

    delays = {job_row(db, i)["visible_at"] - clock.now for i in ids}
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert len(delays) > 1  # jittered, not one fixed delay
