"""The command line: exit codes (0 success, 2 usage, 1 failure), stats, dead, purge.

Most commands run in-process through `main()`, which is what the entry point calls;
the worker and one entry-point check run as real processes.
"""

from __future__ import annotations

import json

import pytest

from queuecore.cli.main import main
from tests.worker.processes import run_queuecore

UNREACHABLE = (
    "sqlite:////nonexistent-folder-for-queuecore-tests/jobs.db",
    "postgresql+psycopg://postgres@127.0.0.1:1/queuecore",
)


@pytest.fixture(autouse=True)
def no_dsn_from_the_shell(monkeypatch):
    monkeypatch.delenv("QUEUECORE_DSN", raising=False)


def test_usage_errors_exit_2_and_say_what_to_do(capsys, dsn):
    assert main([]) == 2
    assert main(["stats"]) == 2
    assert "QUEUECORE_DSN" in capsys.readouterr().err
    assert main(["worker", "no-colon", "--dsn", dsn]) == 2
    assert "MODULE:REGISTRY" in capsys.readouterr().err
    assert main(["worker", "tests.worker.nowhere:REGISTRY", "--dsn", dsn]) == 2
    assert "PYTHONPATH" in capsys.readouterr().err
    assert main(["worker", "tests.worker.handlers:nothing", "--dsn", dsn]) == 2
    assert main(["worker", "json:dumps", "--dsn", dsn]) == 2  # not a mapping
    assert (
        main(["worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--concurrency", "0"]) == 2
    )
    assert main(["dead", "requeue", "--dsn", dsn]) == 2
    assert main(["purge", "--dsn", dsn, "--older-than", "1", "--states", "queued"]) == 2


@pytest.mark.parametrize("unreachable", UNREACHABLE, ids=["sqlite", "postgresql"])
def test_an_unreachable_database_exits_1_with_what_to_check(capsys, unreachable):
    assert main(["stats", "--dsn", unreachable]) == 1
    err = capsys.readouterr().err
    assert "cannot open the database" in err and len(err.splitlines()) == 1


def test_migrate_exits_0(capsys, empty_dsn):
    assert main(["migrate", "--dsn", empty_dsn]) == 0
    assert "revision" in capsys.readouterr().out


def test_stats_json_counts_per_queue_and_overall(capsys, make_queue, dsn):
    queue = make_queue(clock=None)  # the command's clock: "the last hour" is the same hour
    queue.enqueue("a", {}, queue="mail")
    queue.enqueue("a", {}, queue="mail")
    queue.enqueue("b", {}, queue="reports")
    [job] = queue.claim("w", queues=["reports"])
    queue.fail(job, "gave up", permanent=True)
    queue.enqueue("c", {}, queue="archive")
    queue.complete(queue.claim("w", queues=["archive"])[0])

    assert main(["stats", "--dsn", dsn, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["queued"], stats["running"], stats["dead"]) == (2, 0, 1)
    assert stats["queues"]["mail"]["queued"] == 2
    assert stats["queues"]["reports"]["dead"] == 1

    assert stats["kinds"]["a"]["ready_now"] == 2  # W2: ready jobs per kind
    assert "b" not in stats["kinds"]  # dead: no longer live
    assert (stats["done_last_hour"], stats["dead_last_hour"]) == (1, 1)
    assert stats["queues"]["reports"]["dead_last_hour"] == 1
    # A queue whose only job finished within the hour is listed all the same.
    assert stats["queues"]["archive"] == {**stats["queues"]["archive"], "queued": 0}
    assert stats["queues"]["archive"]["done_last_hour"] == 1

    assert main(["stats", "--dsn", dsn]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["queue", "queued", "running"]
    assert "done (1 h)" in table.splitlines()[0]
    assert "(all)" in table and "archive" in table
    [kinds_header, _, a_row] = table.split("\n\n")[1].splitlines()[:3]
    assert kinds_header.split()[:4] == ["kind", "queued", "running", "ready"]
    assert a_row.split()[:4] == ["a", "2", "0", "2"]


def test_dead_list_and_requeue(capsys, queue, dsn):
    job_id = queue.enqueue("charge", {"card": "4111-secret"}).id
    [job] = queue.claim("w")
    queue.fail(job, "Permanent: card declined", permanent=True)

    assert main(["dead", "list", "--dsn", dsn, "--json"]) == 0
    out = capsys.readouterr().out
    [listed] = json.loads(out)
    assert (listed["id"], listed["kind"], listed["last_error"]) == (
        job_id,
        "charge",
        "Permanent: card declined",
    )
    assert "4111-secret" not in out  # payloads stay out of listings
    assert main(["dead", "list", "--dsn", dsn]) == 0
    assert "card declined" in capsys.readouterr().out

    assert main(["dead", "requeue", "--dsn", dsn, str(job_id)]) == 0
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts) == ("queued", 0)
    assert main(["dead", "requeue", "--dsn", dsn, str(job_id)]) == 1  # no longer dead
    assert main(["dead", "list", "--dsn", dsn]) == 0
    assert "no dead jobs" in capsys.readouterr().out


def test_purge_deletes_old_finished_jobs_only(capsys, queue, dsn):
    finished = queue.enqueue("a", {}).id
    [job] = queue.claim("w")
    queue.complete(job)
    waiting = queue.enqueue("a", {}).id
    # The fake clock stands in 2023: to the command's real clock the job is long finished.
    assert main(["purge", "--dsn", dsn, "--older-than", "3600"]) == 0
    assert "purged 1" in capsys.readouterr().out
    assert queue.get(finished) is None
    assert queue.get(waiting).state == "queued"


def test_worker_process_runs_the_jobs_and_exits_0_when_idle(make_queue, dsn):
    queue = make_queue(clock=None)
    ids = [queue.enqueue("quick", {}).id for _ in range(3)]
    unknown = queue.enqueue("unknown", {}).id
    done = run_queuecore(
        "worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--exit-when-idle", "0.5"
    )
    assert done.returncode == 0, done.stderr
    assert [queue.get(i).state for i in ids] == ["done"] * 3
    snap = queue.get(unknown)  # W2: no handler here, so never claimed
    assert (snap.state, snap.attempts, snap.last_error) == ("queued", 0, None)
    assert done.stderr.count(" done in ") == 3  # one INFO line per outcome


def test_the_entry_point_exits_2_on_a_usage_error():
    done = run_queuecore("stats")
    assert done.returncode == 2
    assert "pass --dsn" in done.stderr
