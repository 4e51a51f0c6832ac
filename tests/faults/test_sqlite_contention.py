"""SQLite under write contention: many processes at once never see "database is
locked"; a lock held past the busy timeout is a queuecore error that says so; long
readers (a read transaction, a stats call, a backup) do not block the writers (WAL)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

import queuecore
from tests.faults.actors import produce_and_consume, run_all

PROCESSES = 6
JOBS_EACH = 40


def run_workers(dsn: str) -> tuple[list[int], list[int]]:
    results = run_all(produce_and_consume, [(dsn, f"p{n}", JOBS_EACH) for n in range(PROCESSES)])
    failures = [r for r in results if isinstance(r, str)]
    assert not failures, failures[0]
    enqueued = [i for r in results for i in r["enqueued"]]
    assert len(set(enqueued)) == PROCESSES * JOBS_EACH
    return enqueued, [i for r in results for i in r["completed"]]


def assert_each_done_once(dsn: str, enqueued: list[int], completed: list[int]) -> None:
    assert Counter(completed) == Counter(enqueued)  # every job completed, none twice
    with queuecore.connect(dsn) as queue:
        stats = queue.stats()
        assert (stats["queued"], stats["running"], stats["dead"]) == (0, 0, 0)
        assert {queue.get(i).state for i in enqueued} == {"done"}


def test_processes_racing_on_a_new_file_never_see_database_is_locked(tmp_path: Path):
    """They also race to create the schema and switch the file to WAL."""
    dsn = f"sqlite:///{tmp_path / 'fresh.db'}"
    enqueued, completed = run_workers(dsn)
    assert_each_done_once(dsn, enqueued, completed)


def test_long_readers_do_not_block_workers(tmp_path: Path):
    path = tmp_path / "jobs.db"
    dsn = f"sqlite:///{path}"
    queue = queuecore.connect(dsn)
    queue.enqueue("before", {})
    (early,) = queue.claim("reader-test")
    assert queue.complete(early)

    # A read transaction held open across the whole run: its snapshot stays put.
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM queuecore_jobs").fetchone() == (1,)
    enqueued, completed = run_workers(dsn)
    assert reader.execute("SELECT count(*) FROM queuecore_jobs").fetchone() == (1,)
    # A backup taken while the reader still holds its snapshot, and a stats call.
    backup = sqlite3.connect(tmp_path / "backup.db")
    sqlite3.connect(path).backup(backup)
    assert queue.stats()["queued"] == 0
    reader.execute("COMMIT")

    assert_each_done_once(dsn, [early.id, *enqueued], [early.id, *completed])
    copied = backup.execute("SELECT count(*) FROM queuecore_jobs WHERE state = 'done'")
    assert copied.fetchone() == (1 + PROCESSES * JOBS_EACH,)
    queue.close()


def test_a_lock_held_past_the_busy_timeout_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "jobs.db"
    queue = queuecore.connect(f"sqlite:///{path}", busy_timeout=0.2)
    queue.enqueue("held", {})
    (job,) = queue.claim("w")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for write in (
            lambda: queue.enqueue("blocked", {}),
            lambda: queue.claim("w"),
            lambda: queue.complete(job),
        ):
            with pytest.raises(queuecore.DatabaseBusyError, match=r"busy_timeout=0\.2s"):
                write()
        assert queue.stats()["running"] == 1  # reads still go through
    finally:
        holder.execute("ROLLBACK")
    snap = queue.get(job.id)
    assert (snap.state, snap.attempts) == ("running", 1)  # nothing half-written
    assert queue.stats()["queued"] == 0
    assert queue.complete(job)
    queue.close()


def test_a_file_that_cannot_be_switched_to_wal_is_a_clear_error(tmp_path: Path):
    """A reader of a rollback-journal file keeps the switch to WAL from happening."""
    path = tmp_path / "legacy.db"
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("CREATE TABLE unrelated (x)")
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM unrelated").fetchall()
    with pytest.raises(queuecore.DatabaseBusyError, match="switching the database to WAL"):
        queuecore.connect(f"sqlite:///{path}", busy_timeout=0.2)
    reader.execute("COMMIT")
    tables = reader.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("unrelated",)]
