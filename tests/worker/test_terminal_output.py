"""Terminal-safe output: a control character in a kind, a queue or an error text (written
directly, as R29 refuses them in new names now) is printed as an escape by `stats`,
`dead list` and the worker's log lines, never sent to the terminal raw."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from queuecore.cli.main import main
from queuecore.observe import terminal
from queuecore.observe.terminal import printable
from queuecore.observe.worklog import SafeFormatter
from queuecore.sql.schema import jobs
from tests.worker.processes import run_queuecore

# Clears the screen, then retitles the window.
ESC = "\x1b[2J\x1b]0;owned\x07"
SHOWN = "\\x1b[2J\\x1b]0;owned\\x07"


def rename(db: sa.Engine, job_id: int, **values: str) -> None:
    with db.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))


def assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, text
    assert SHOWN in text, text


def test_stats_and_dead_list_print_control_characters_as_escapes(capsys, queue, db, dsn):
    dead = queue.enqueue("k", {}, max_attempts=1).id
    (job,) = queue.claim("w")
    assert queue.fail(job, f"boom {ESC}") == "dead"
    live = queue.enqueue("k", {}).id
    rename(db, live, kind=f"kind{ESC}", queue=f"queue{ESC}")
    rename(db, dead, kind=f"kind{ESC}", queue=f"queue{ESC}")

    assert main(["stats", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert f"kind{SHOWN}" in out and f"queue{SHOWN}" in out
    assert main(["dead", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert f"boom {SHOWN}" in out


def test_a_workers_log_lines_print_control_characters_as_escapes(make_queue, db, dsn):
    queue = make_queue(clock=None)
    quick = queue.enqueue("quick", {}).id
    rename(db, quick, queue=f"queue{ESC}")
    failing = queue.enqueue("raises", {"message": f"boom {ESC}"}, max_attempts=1).id
    done = run_queuecore(
        "worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--exit-when-idle", "0.5"
    )
    assert done.returncode == 0, done.stderr
    assert [queue.get(i).state for i in (quick, failing)] == ["done", "dead"]
    assert_escaped(done.stderr)
    assert f"queue queue{SHOWN}" in done.stderr and f"boom {SHOWN}" in done.stderr


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_printable_text_passed_over_is_what_the_escaping_leaves_alone(text):
    """`printable` returns text Python calls printable as it is: each character it escapes
    is one Python calls unprintable, so the answer is the escaping's."""
    assert printable(text) == terminal._UNSAFE.sub(terminal._escape, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=4_102_444_800), min_size=1, max_size=4))
def test_log_lines_show_the_time_as_logging_would(created_times: list[float]):
    """The worker's formatter makes the date and time once a second: every line's time
    must still be the one logging's own formatter gives, in whatever order lines come."""
    ours, theirs = SafeFormatter(), logging.Formatter()
    for created in created_times:
        record = logging.LogRecord("queuecore.worker", logging.INFO, __file__, 1, "m", (), None)
        record.created = created
        record.msecs = (created - int(created)) * 1000 // 1
        assert ours.formatTime(record) == theirs.formatTime(record)
