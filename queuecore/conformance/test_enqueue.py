"""R01 to R03: what enqueue writes, dedupe keys, and enqueue inside the caller's transaction."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from queuecore.conformance.helpers import count_jobs, job_row


def test_r01_enqueue_creates_a_queued_job(queue, clock, db):
    res = queue.enqueue("email", {"to": "a@example.com"}, delay=5)

    assert res.created is True
    row = job_row(db, res.id)
    assert row["kind"] == "email"
    assert row["payload"] == {"to": "a@example.com"}
    assert row["queue"] == "default"
    assert row["priority"] == 0
    assert row["state"] == "queued"
    assert row["attempts"] == 0
    assert row["max_attempts"] == 5
    assert row["visible_at"] == clock.now + 5
    assert row["created_at"] == clock.now
    assert row["lease_token"] is None
    assert row["finished_at"] is None
    assert count_jobs(db) == 1


def test_r01_enqueue_stores_queue_priority_max_attempts_and_run_at(queue, clock, db):
    at = clock.now + 3600
    by_epoch = queue.enqueue(
        "report", {"n": 1}, queue="nightly", priority=-3, max_attempts=2, run_at=at
    )
    aware = queue.enqueue("report", {"n": 2}, run_at=datetime.fromtimestamp(at, timezone.utc))
    naive_utc = queue.enqueue(
        "report", {"n": 3}, run_at=datetime.fromtimestamp(at, timezone.utc).replace(tzinfo=None)
    )

    row = job_row(db, by_epoch.id)
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("nightly", -3, 2)
    assert [job_row(db, r.id)["visible_at"] for r in (by_epoch, aware, naive_utc)] == [at] * 3
    assert row["created_at"] == clock.now


def test_r01_enqueue_many_creates_queued_jobs_in_order(queue, clock, db):
    ids = queue.enqueue_many("resize", [{"n": i} for i in range(5)], queue="img", priority=2)

    assert len(ids) == 5 and ids == sorted(set(ids))
    rows = [job_row(db, i) for i in ids]
    assert [r["payload"] for r in rows] == [{"n": i} for i in range(5)]
    assert {(r["state"], r["attempts"], r["queue"], r["priority"]) for r in rows} == {
        ("queued", 0, "img", 2)
    }
    assert {r["visible_at"] for r in rows} == {clock.now}
    assert queue.enqueue_many("resize", []) == []
    assert count_jobs(db) == 5


def test_r02_dedupe_key_returns_the_existing_job_and_writes_nothing(queue, db):
    first = queue.enqueue("email", {"v": 1}, dedupe_key="order-17")
    # Same kind and payload (another kind or payload is R27's conflict); the rest differs.
    again = queue.enqueue("email", {"v": 1}, queue="other", priority=9, dedupe_key="order-17")

    assert first.created is True
    assert again.id == first.id and again.created is False
    assert count_jobs(db) == 1
    row = job_row(db, first.id)
    assert (row["kind"], row["payload"], row["queue"], row["priority"]) == (
        "email",
        {"v": 1},
        "default",
        0,
    )


def test_r02_dedupe_key_holds_until_the_job_is_purged(queue, clock, db):
    first = queue.enqueue("email", {}, dedupe_key="once")
    queue.complete(queue.claim("w")[0])
    done_again = queue.enqueue("email", {}, dedupe_key="once")
    assert (done_again.id, done_again.created) == (first.id, False)

    clock.advance(10)
    assert queue.purge(older_than=5) == 1
    fresh = queue.enqueue("email", {}, dedupe_key="once")
    assert fresh.created is True
    assert job_row(db, fresh.id)["state"] == "queued"
    assert count_jobs(db) == 1


def test_r03_enqueue_in_a_rolled_back_transaction_leaves_no_job(queue, db, app_table):
    with queue.engine.connect() as conn:
        tx = conn.begin()
        conn.execute(app_table.insert().values(note="order 1"))
        res = queue.enqueue("ship", {"order": 1}, conn=conn)
        queue.enqueue_many("ship", [{"order": 1, "part": 2}], conn=conn)
        inside = conn.execute(
            sa.text("SELECT state FROM queuecore_jobs WHERE id = :id"), {"id": res.id}
        ).scalar()
        assert inside == "queued"
        assert count_jobs(db) == 0  # not visible outside before the commit
        tx.rollback()

    assert queue.get(res.id) is None
    assert count_jobs(db) == 0
    assert queue.claim("w") == []
    with db.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(app_table)).scalar() == 0


def test_r03_enqueue_in_a_committed_transaction_creates_the_job(queue, db, app_table):
    with queue.engine.begin() as conn:
        conn.execute(app_table.insert().values(note="order 2"))
        res = queue.enqueue("ship", {"order": 2}, conn=conn, dedupe_key="ship-2")
        (part,) = queue.enqueue_many("ship", [{"order": 2, "part": 2}], conn=conn)

    assert res.created is True
    assert queue.get(res.id).state == "queued"
    assert [job.id for job in queue.claim("w", limit=5)] == [res.id, part]
    with db.connect() as conn:
        assert conn.execute(sa.select(app_table.c.note)).scalars().all() == ["order 2"]
