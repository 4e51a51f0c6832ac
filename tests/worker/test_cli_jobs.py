"""`queuecore enqueue` and `queuecore cancel`: what they print, what they write, and their
exit codes (0 done, 2 usage, 1 failure) with a message that says what happened."""

from __future__ import annotations

import json

import pytest

from queuecore.cli.main import main
from queuecore.conformance.helpers import all_rows
from tests.worker.processes import run_queuecore


@pytest.fixture(autouse=True)
def no_dsn_from_the_shell(monkeypatch):
    monkeypatch.delenv("QUEUECORE_DSN", raising=False)


@pytest.fixture
def rows(dsn):
    import sqlalchemy as sa

    engine = sa.create_engine(dsn)
    yield lambda: all_rows(engine)
    engine.dispose()


def test_enqueue_prints_the_id_and_writes_the_job(capsys, queue, dsn):
    args = ["enqueue", "email", "--dsn", dsn, "--payload", '{"to": "a@example.com"}']
    assert main([*args, "--queue", "mail", "--priority", "-1", "--max-attempts", "2"]) == 0
    job_id = int(capsys.readouterr().out)
    snap = queue.get(job_id)
    assert (snap.kind, snap.payload, snap.queue, snap.priority, snap.max_attempts) == (
        "email",
        {"to": "a@example.com"},
        "mail",
        -1,
        2,
    )
    assert snap.state == "queued" and snap.visible_at <= snap.created_at


def test_enqueue_with_a_delay_and_a_dedupe_key(capsys, queue, dsn):
    args = ["enqueue", "report", "--dsn", dsn, "--delay", "60", "--dedupe-key", "r-1"]
    assert main(args) == 0
    first = capsys.readouterr()
    job_id = int(first.out)
    snap = queue.get(job_id)
    # abs: on PostgreSQL the two times are two reads of the server clock, microseconds apart
    assert (snap.visible_at - snap.created_at).total_seconds() == pytest.approx(60, abs=0.01)
    assert snap.dedupe_key == "r-1" and snap.payload == {}

    assert main(args) == 0  # the same work again: R02, the same id
    again = capsys.readouterr()
    assert int(again.out) == job_id and "already had dedupe key" in again.err

    assert main([*args, "--payload", '{"other": 1}']) == 1  # R27
    conflict = capsys.readouterr()
    assert f"job {job_id}" in conflict.err and "another payload" in conflict.err
    assert conflict.out == ""


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--payload", "{not json"], "--payload is not JSON"),
        (["--payload", "[1, 2]"], "JSON object"),
        (["--delay", "-5"], "delay"),
        (["--max-attempts", "0"], "--max-attempts must be"),
        (["--priority", "high"], "invalid int"),
    ],
)
def test_enqueue_bad_input_exits_2_and_writes_nothing(capsys, dsn, rows, extra, says):
    assert main(["enqueue", "k", "--dsn", dsn, *extra]) == 2
    assert says in capsys.readouterr().err
    assert rows() == {}


def test_enqueue_without_a_database_exits_2(capsys):
    assert main(["enqueue", "k"]) == 2
    assert "QUEUECORE_DSN" in capsys.readouterr().err


def test_cancel_cancels_live_jobs_and_says_why_not_for_the_others(capsys, queue, dsn):
    queued = queue.enqueue("k", {}).id
    running = queue.enqueue("k", {}).id
    done = queue.enqueue("k", {}).id
    queue.cancel(queued)  # cancelled below a second time: refused
    fresh = queue.enqueue("k", {}).id
    first, second = queue.claim("w", limit=2)
    assert (first.id, second.id) == (running, done)
    queue.complete(second)

    assert main(["cancel", "--dsn", dsn, str(fresh), str(running)]) == 0
    out = capsys.readouterr().out
    assert f"cancelled job {fresh}" in out and f"cancelled job {running}" in out
    assert queue.get(running).state == "cancelled"

    assert main(["cancel", "--dsn", dsn, str(done), str(queued), "424242"]) == 1
    err = capsys.readouterr().err
    assert f"job {done} not cancelled: it is done already" in err
    assert f"job {queued} not cancelled: it is cancelled already" in err
    assert "job 424242 not cancelled: no such job" in err
    assert queue.get(done).state == "done"


def test_cancel_of_an_id_that_is_not_an_integer_exits_2(capsys, queue, dsn, rows):
    queue.enqueue("k", {})
    before = rows()
    assert main(["cancel", "--dsn", dsn, "seven"]) == 2
    assert "invalid int value: 'seven'" in capsys.readouterr().err
    assert main(["cancel", "--dsn", dsn]) == 2  # no id at all
    assert rows() == before


def test_enqueue_through_the_entry_point(queue, dsn):
    done = run_queuecore("enqueue", "quick", "--dsn", dsn, "--payload", '{"n": 1}')
    assert done.returncode == 0, done.stderr
    assert queue.get(int(done.stdout)).payload == {"n": 1}


def test_jobs_lists_by_state_kind_and_queue_in_pages(capsys, queue, dsn):
    """R31 on the command line: filters as comma lists, a cursor, JSON for machines."""
    first, second, third = queue.enqueue_many("email", [{}, {}, {}], queue="mail")
    queue.enqueue("report", {})
    queue.fail(queue.claim("w", queues=["mail"])[0], "smtp down", permanent=True)
    args = ["jobs", "--dsn", dsn, "--kind", "email", "--queue", "mail,other"]
    assert main([*args, "--state", "queued,dead", "--limit", "2", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(j["id"], j["state"], j["last_error"]) for j in listed] == [
        (first, "dead", "smtp down"),
        (second, "queued", None),
    ]
    assert main([*args, "--after", str(second)]) == 0
    out = capsys.readouterr().out
    assert str(third) in out and "queued" in out and "report" not in out
    assert main(["jobs", "--dsn", dsn, "--state", "finished"]) == 2
    assert "state must be one of" in capsys.readouterr().err


def test_workers_lists_the_workers_seen(capsys, make_queue, dsn):
    """R33 on the command line, with a record written on the command's own clock."""
    assert main(["workers", "--dsn", dsn]) == 0
    assert "no worker seen" in capsys.readouterr().out
    record = {"host": "h", "pid": 7, "queues": None, "kinds": ["k"], "concurrency": 2}
    make_queue(clock=None).report_worker("w-1", {**record, "heartbeat_seconds": 60, "running": 1})
    assert main(["workers", "--dsn", dsn, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert {k: listed[k] for k in ("name", "host", "pid", "queues", "kinds", "running")} == {
        "name": "w-1",
        "host": "h",
        "pid": 7,
        "queues": None,
        "kinds": ["k"],
        "running": 1,
    }
    assert main(["workers", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "w-1" in out and "alive" in out and "h:7" in out and "1/2" in out
