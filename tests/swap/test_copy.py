"""`queuecore.copy` and `queuecore copy`: every job moves with every column, in either
direction, once however often it runs, and never over a different job."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.cli.main import main
from queuecore.sql.schema import jobs
from tests.swap.helpers import DIRECTIONS, new_database, new_pair, rows


@pytest.fixture(params=DIRECTIONS)
def pair(request, tmp_path):
    return new_pair(request, tmp_path)


def fill(dsn: str) -> dict[str, int]:
    """Jobs in every state, with keys, priorities, queues, errors; a short lease."""
    ids: dict[str, int] = {}
    with queuecore.connect(dsn, lease_seconds=0.2, max_attempts=2) as q:
        ids["done"] = q.enqueue("mail", {"to": "a"}, dedupe_key="mail-a", priority=-1).id
        ids["dead"] = q.enqueue("mail", {"to": "b"}, dedupe_key="mail-b", priority=-1).id
        ids["retrying"] = q.enqueue("mail", {"to": "c"}, priority=-1).id
        ids["expired"] = q.enqueue("report", {"n": [1, 2.5, None]}, queue="slow", priority=-1).id
        ids["queued"] = q.enqueue("mail", {"to": "é\u2603"}, dedupe_key="mail-d").id
        ids["delayed"] = q.enqueue("mail", {"to": "e"}, delay=3600, priority=5).id
        [done] = q.claim("w", queues=["default"])
        assert q.complete(done)
        [dead] = q.claim("w", queues=["default"])
        q.fail(dead, "card declined", permanent=True)
        [retrying] = q.claim("w", queues=["default"])
        q.fail(retrying, "timeout", retry_in=600)
        q.claim("w", queues=["slow"])
    time.sleep(0.25)  # the running job's lease ends: a crashed worker's job
    return ids


def test_every_job_arrives_with_every_column(pair):
    source, target = pair
    fill(source)
    report = queuecore.copy(source, target, batch=2)
    assert (report.copied, report.already_there) == (6, 0)
    assert rows(target) == rows(source)
    assert {r["state"] for r in rows(target).values()} == {"done", "dead", "queued", "running"}


@pytest.mark.parametrize("pair", ["sqlite-to-postgresql", "mariadb-to-postgresql"], indirect=True)
def test_a_postgresql_target_is_analyzed_after_the_copy(pair):
    """Its planner learns of the jobs it was given (`Backend.refresh_statistics`):
    planned for an empty table, every claim sorted the whole backlog until autovacuum
    came round, up to a minute later. ANALYZE counts the rows; no analyze leaves -1."""
    source, target = pair
    fill(source)
    queuecore.copy(source, target)
    engine = sa.create_engine(target)
    try:
        with engine.connect() as conn:
            counted = conn.execute(
                sa.text("SELECT reltuples FROM pg_class WHERE oid = 'queuecore_jobs'::regclass")
            ).scalar_one()
    finally:
        engine.dispose()
    assert counted == 6


def test_a_second_run_copies_nothing_twice(pair):
    source, target = pair
    fill(source)
    queuecore.copy(source, target)
    before = rows(target)
    report = queuecore.copy(source, target, batch=4)
    assert (report.copied, report.already_there) == (0, 6)
    assert rows(target) == before


def test_a_job_enqueued_on_the_source_meanwhile_arrives_at_the_next_run(pair):
    source, target = pair
    fill(source)
    queuecore.copy(source, target)
    with queuecore.connect(source) as q:
        late = q.enqueue("mail", {"to": "late"}).id
    report = queuecore.copy(source, target)
    assert (report.copied, report.already_there) == (1, 6)
    assert rows(target)[late] == rows(source)[late]


def test_an_interrupted_copy_starts_again_where_it_needs_to(pair):
    source, target = pair
    fill(source)
    seen = []

    def interrupt(n):
        seen.append(n)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        queuecore.copy(source, target, batch=2, progress=interrupt)
    assert len(rows(target)) == 4  # two whole batches, nothing half-written
    report = queuecore.copy(source, target, batch=2)
    assert (report.copied, report.already_there) == (2, 4)
    assert rows(target) == rows(source)


def test_the_targets_ids_continue_past_every_id_the_source_handed_out(pair):
    source, target = pair
    fill(source)
    with queuecore.connect(source) as q:
        last = q.enqueue("mail", {"to": "purged"}).id
        [job] = q.claim("w", queues=["default"])
        while job.id != last:  # finish everything up to the last job, then purge it
            q.complete(job)
            [job] = q.claim("w", queues=["default"])
        q.complete(job)
        q.purge(older_than=0)
    assert last not in rows(source)
    report = queuecore.copy(source, target)
    assert report.next_id >= last
    with queuecore.connect(target) as q:
        assert q.enqueue("mail", {"to": "new"}).id > last  # a purged id never comes back


def test_dedupe_keys_keep_their_jobs_after_the_copy(pair):
    source, target = pair
    ids = fill(source)
    queuecore.copy(source, target)
    with queuecore.connect(target) as q:
        again = q.enqueue("mail", {"to": "a"}, dedupe_key="mail-a")
        assert (again.id, again.created) == (ids["done"], False)


def test_live_leases_are_refused_by_default(pair):
    source, target = pair
    with queuecore.connect(source, lease_seconds=600) as q:
        q.enqueue("mail", {})
        q.claim("w")
    with pytest.raises(queuecore.LiveLeasesError) as caught:
        queuecore.copy(source, target)
    # The lease's rest is read when the copy runs: a loaded machine may take a second.
    assert re.match(
        r"1 job\(s\) are running on the source under leases that end within (600|59\d)s: "
        r"stop the source's workers \(SIGTERM\)",
        str(caught.value),
    ), caught.value
    assert "--live-leases keep" in str(caught.value)
    assert rows(target) == {}


def test_kept_leases_are_claimable_on_the_target_only_once_they_end(pair):
    source, target = pair
    with queuecore.connect(source, lease_seconds=600) as q:
        job_id = q.enqueue("mail", {}).id
        [held] = q.claim("w")
    queuecore.copy(source, target, live_leases="keep")
    ends = rows(target)[job_id]["visible_at"]
    with queuecore.connect(target, clock=lambda: ends - 1) as q:
        assert q.claim("w2") == []
    with queuecore.connect(target, clock=lambda: ends + 1) as q:
        [again] = q.claim("w2")
        assert (again.id, again.attempts) == (job_id, held.attempts + 1)


def test_a_different_job_under_the_same_id_is_refused_before_anything_is_written(pair):
    source, target = pair
    fill(source)
    with queuecore.connect(target) as q:
        q.enqueue("not-the-same", {"x": 1})
    before = rows(target)
    with pytest.raises(queuecore.CopyConflictError, match=r"different jobs under ids .*\[1\]"):
        queuecore.copy(source, target)
    assert rows(target) == before


def test_another_job_holding_a_dedupe_key_is_refused(pair):
    source, target = pair
    with queuecore.connect(source) as q:
        q.enqueue("mail", {}, dedupe_key="k")
    with queuecore.connect(target) as q:
        q.enqueue("mail", {"other": True}, delay=0)
        q.enqueue("mail", {}, dedupe_key="k")  # id 2 here, id 1 on the source
    engine = sa.create_engine(target)
    with engine.begin() as conn:
        conn.execute(sa.delete(jobs).where(jobs.c.id == 1))
    engine.dispose()
    with pytest.raises(
        queuecore.CopyConflictError, match="key 'k' is job 2 on the target, job 1 on the source"
    ):
        queuecore.copy(source, target)


def test_rows_past_the_targets_limits_are_refused_before_anything_is_written(request, tmp_path):
    """R29: a SQLite file written before the limits (here: by hand, as enqueue refuses
    such rows now) into MariaDB, which cannot hold them: nothing copied, the ids named."""
    source = new_database("sqlite", request, tmp_path, "source")
    target = new_database("mariadb", request, tmp_path, "target")
    with queuecore.connect(source) as q:
        ids = q.enqueue_many("k", [{"n": n} for n in range(5)])
    deep: object = 0
    for _ in range(40):
        deep = [deep]
    engine = sa.create_engine(source)
    with engine.begin() as conn:
        for job_id, values in [
            (ids[1], {"kind": "k" * 256}),
            (ids[2], {"payload": {"deep": deep}}),
            (ids[3], {"queue": "q\x1b[2J"}),
        ]:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))
    engine.dispose()
    with pytest.raises(queuecore.CopyLimitsError) as refused:
        queuecore.copy(source, target, batch=2)
    assert refused.value.ids == ids[1:4]
    assert f"ids {ids[1:4]}" in str(refused.value)
    assert "kind is 256 characters long" in str(refused.value)
    assert rows(target) == {}


def test_copying_a_database_into_itself_is_refused(tmp_path):
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    with pytest.raises(ValueError, match="the source and the target are the same database"):
        queuecore.copy(dsn, dsn)


def test_the_command_reports_what_it_did(pair, capsys):
    source, target = pair
    fill(source)
    assert main(["copy", "--from", source, "--to", target, "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("copied 6 job(s) (0 already on the target) in ")
    assert "jobs/s; new jobs on the target get ids above 1000006; the source may hand out " in out
    assert main(["copy", "--from", source, "--to", target]) == 0
    assert capsys.readouterr().out.startswith("copied 0 job(s) (6 already on the target)")


def test_the_command_names_its_option_in_a_bad_value(tmp_path, capsys):
    a, b = (f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db"))
    assert main(["copy", "--from", a, "--to", b, "--batch", "0"]) == 2
    assert "--batch must be an integer of at least 1" in capsys.readouterr().err


def test_a_terminal_gets_a_progress_bar(tmp_path):
    source = f"sqlite:///{tmp_path / 'a.db'}"
    with queuecore.connect(source) as q:
        q.enqueue_many("mail", [{"n": n} for n in range(50)])
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "queuecore",
            "copy",
            "--from",
            source,
            "--to",
            f"sqlite:///{tmp_path / 'b.db'}",
            "--batch",
            "10",
        ],
        stderr=follower,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
        timeout=60,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    drawn = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "50/50" in drawn and "100%" in drawn
