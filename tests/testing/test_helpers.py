"""queuecore.testing tests itself: run_handler and make_job without a database; drain on
both backends, through retries on a fake clock; the pytest fixture through the entry
point that users get by installing queuecore."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.fixtures import FakeClock as ConformanceClock
from queuecore.testing import Drained, FakeClock, drain, make_job, run_handler

# --- one handler, no database ----------------------------------------------------------------


def test_make_job_has_sensible_defaults() -> None:
    job = make_job()
    assert (job.kind, job.payload, job.queue, job.attempts, job.max_attempts) == (
        "test",
        {},
        "default",
        1,
        5,
    )
    assert len(job.lease_token) == 32
    assert job.lease_expires_at > datetime.now(timezone.utc)
    assert make_job().lease_token != job.lease_token
    other = make_job("email", {"to": "a@example.com"}, id=7, attempts=3, max_attempts=3)
    assert (other.id, other.kind, other.payload["to"], other.attempts) == (
        7,
        "email",
        "a@example.com",
        3,
    )


def test_run_handler_gives_the_handler_its_lease() -> None:
    seen = []

    def handler(job: queuecore.Job) -> None:
        lease = queuecore.current_lease()
        seen.append((lease.job is job, job.payload, job.attempts, lease.lost.is_set()))

    assert run_handler(handler, {"n": 1}, attempts=2).status == "completed"
    assert run_handler(handler, {"n": 2}, lost=True).completed
    assert seen == [(True, {"n": 1}, 2, False), (True, {"n": 2}, 1, True)]


def test_run_handler_returns_the_effect() -> None:
    def effect(conn: sa.Connection) -> None: ...

    outcome = run_handler(lambda job: effect)
    assert (outcome.status, outcome.effect, outcome.error) == ("completed", effect, None)


@pytest.mark.parametrize(
    ("raised", "status", "retry_in"),
    [
        (queuecore.Retry(12), "retry", 12.0),
        (queuecore.Permanent("bad input"), "permanent", None),
        (KeyError("missing"), "error", None),
    ],
)
def test_run_handler_reports_what_the_handler_raised(
    raised: Exception, status: str, retry_in: float | None
) -> None:
    def handler(job: queuecore.Job) -> None:
        raise raised

    outcome = run_handler(handler)
    assert (outcome.status, outcome.retry_in, outcome.error) == (status, retry_in, raised)
    assert not outcome.completed


def test_run_handler_reads_a_returned_value_as_the_result() -> None:
    outcome = run_handler(lambda job: {"total": 3})
    assert (outcome.status, outcome.result, outcome.effect) == ("completed", {"total": 3}, None)

    def effect(conn: object) -> None:
        return None

    both = run_handler(lambda job: queuecore.Done(result=[1], effect=effect))
    assert (both.status, both.result, both.effect) == ("completed", [1], effect)


def test_run_handler_refuses_a_result_that_cannot_be_stored() -> None:
    outcome = run_handler(lambda job: {"not json": {1, 2}})
    assert outcome.status == "error"
    assert isinstance(outcome.error, TypeError)
    assert "result is not JSON" in str(outcome.error)


def test_run_handler_runs_a_given_job() -> None:
    job = make_job("email", {"to": "b@example.com"})
    outcome = run_handler(lambda j: None if j is job else 1, job=job)
    assert outcome.completed


def test_a_fake_clock_moves_only_forward() -> None:
    clock = FakeClock(100.0)
    clock.advance(2.5)
    assert clock() == 102.5
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)


# --- drain, on both backends --------------------------------------------------------------------


def states(runs: list[Drained]) -> list[tuple[str, int, str, str]]:
    return [(r.job.kind, r.job.attempts, r.outcome.status, r.state) for r in runs]


def test_drain_runs_every_ready_job_and_reports_each(
    make_queue: Callable[..., queuecore.Queue],
) -> None:
    queue = make_queue()
    ok = queue.enqueue("ok", {"n": 1}).id
    permanent = queue.enqueue("refuse", {}).id
    unknown = queue.enqueue("nobody-knows", {}, max_attempts=1).id

    def refuse(job: queuecore.Job) -> None:
        raise queuecore.Permanent("never")

    runs = drain(queue, {"ok": lambda job: None, "refuse": refuse})
    assert states(runs) == [
        ("ok", 1, "completed", "done"),
        ("refuse", 1, "permanent", "dead"),
        ("nobody-knows", 1, "error", "dead"),
    ]
    assert [queue.get(i).state for i in (ok, permanent, unknown)] == ["done", "dead", "dead"]
    assert "never" in queue.get(permanent).last_error
    assert "nobody-knows" in queue.get(unknown).last_error


def test_drain_stores_a_returned_result(make_queue: Callable[..., queuecore.Queue]) -> None:
    queue = make_queue()
    job_id = queue.enqueue("sum", {"xs": [1, 2, 3]}).id
    runs = drain(queue, {"sum": lambda job: {"sum": sum(job.payload["xs"])}})
    assert [(r.outcome.result, r.state) for r in runs] == [({"sum": 6}, "done")]
    assert queue.get(job_id).result == {"sum": 6}


def test_drain_commits_a_returned_effect_with_the_completion(
    make_queue: Callable[..., queuecore.Queue], app_table: sa.Table, db: sa.Engine
) -> None:
    queue = make_queue()
    job_id = queue.enqueue("note", {"text": "hello"}).id

    def note(job: queuecore.Job) -> Callable[[sa.Connection], object]:
        return lambda conn: conn.execute(
            app_table.insert().values(job_id=job.id, note=job.payload["text"])
        )

    assert states(drain(queue, {"note": note})) == [("note", 1, "completed", "done")]
    with db.connect() as conn:
        assert conn.execute(sa.select(app_table.c.job_id, app_table.c.note)).all() == [
            (job_id, "hello")
        ]


def test_drain_without_a_clock_leaves_retries_waiting(
    make_queue: Callable[..., queuecore.Queue],
) -> None:
    queue = make_queue()
    job_id = queue.enqueue("flaky", {}).id

    def flaky(job: queuecore.Job) -> None:
        raise RuntimeError("not yet")

    assert states(drain(queue, {"flaky": flaky})) == [("flaky", 1, "error", "queued")]
    assert queue.get(job_id).state == "queued"


def test_drain_moves_a_fake_clock_through_retries(
    make_queue: Callable[..., queuecore.Queue],
) -> None:
    clock = FakeClock()
    queue = make_queue(clock=clock, backoff_base=10, backoff_cap=600)
    queue.enqueue("flaky", {}, max_attempts=4)
    queue.enqueue("later", {}, delay=3600)
    calls = []

    def flaky(job: queuecore.Job) -> None:
        calls.append(clock())
        if job.attempts < 3:
            raise RuntimeError("not yet")
        if job.attempts == 3:
            raise queuecore.Retry(5)

    runs = drain(queue, {"flaky": flaky, "later": lambda job: None}, clock=clock)
    assert states(runs) == [
        ("flaky", 1, "error", "queued"),
        ("flaky", 2, "error", "queued"),
        ("flaky", 3, "retry", "queued"),
        ("flaky", 4, "completed", "done"),
        ("later", 1, "completed", "done"),
    ]
    # rng is 1.0: backoff 10 s then 20 s; then Retry's own 5 s; then the delayed job.
    start = calls[0]
    assert [c - start for c in calls] == [0, 10, 30, 35]
    assert clock() - start == 3600


def test_drain_stops_a_job_that_keeps_enqueuing_more(
    make_queue: Callable[..., queuecore.Queue],
) -> None:
    queue = make_queue()
    queue.enqueue("again", {})

    def again(job: queuecore.Job) -> None:
        queue.enqueue("again", {})

    with pytest.raises(RuntimeError, match="after 5 runs"):
        drain(queue, {"again": again}, max_runs=5)


def test_drain_takes_only_the_queues_named(
    make_queue: Callable[..., queuecore.Queue], clock: ConformanceClock
) -> None:
    queue = make_queue()
    queue.enqueue("ok", {}, queue="mail")
    other = queue.enqueue("ok", {}, queue="reports").id
    runs = drain(queue, {"ok": lambda job: None}, queues=["mail"], clock=clock)
    assert [r.job.queue for r in runs] == ["mail"]
    assert queue.get(other).state == "queued"


def test_the_conformance_clock_and_the_public_one_agree(clock: ConformanceClock) -> None:
    assert FakeClock()() == clock()  # fixtures of users and of this suite start alike


# --- the pytest fixture, as a user's suite gets it --------------------------------------------

USER_TESTS = """
import queuecore
from queuecore.testing import drain


def test_uses_the_fixture(queuecore_queue, queuecore_clock, tmp_path):
    job_id = queuecore_queue.enqueue("greet", {"name": "Ada"}).id
    seen = []
    runs = drain(queuecore_queue, {"greet": lambda job: seen.append(job.payload["name"])})
    assert seen == ["Ada"] and runs[0].state == "done"
    assert queuecore_queue.now() == queuecore_clock()
    assert list(tmp_path.glob("*.db"))  # a file, private to this test


def test_each_test_gets_a_fresh_queue(queuecore_queue):
    assert queuecore_queue.stats()["queued"] == 0
"""


def test_the_fixture_reaches_a_users_suite_through_the_entry_point(tmp_path: Path) -> None:
    """A user's suite in a folder of its own, with no conftest: pytest finds the
    fixtures through the installed distribution's pytest11 entry point alone."""
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
