"""W8 time limits, the stopping half of W9 (the cancel grace) and W10 (no poison input),
with real `queuecore worker` processes and the in-process faces, on every backend.

The handlers (tests.worker.limited_handlers) write a line when they start and end, so
the tests count starts and ends from the handlers' side. The latencies these tests see
(a handler's limit, or its cancel, to the next job's start) are printed, never asserted
beyond generous deadlines: the machine is shared and noisy.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore import AsyncWorker, Worker
from queuecore.cli.main import main
from queuecore.job import NOT_JSON
from tests.faults.helpers import PATIENCE
from tests.worker.limited_handlers import ASYNC, LIMIT, SYNC, steps
from tests.worker.processes import queuecore_process, wait_until

SETTLED = ("dead", "done", "cancelled")
DEPTHS = (100, 500, 900)


def settled(queue: Any, *ids: int) -> Any:
    return lambda: all(queue.get(i).state in SETTLED for i in ids)


def started(log: Path, job_id: int) -> float | None:
    """When the handler of `job_id` started (time.time()), or None."""
    return next((at for step, i, at in steps(log) if step == "start" and i == job_id), None)


def ended(log: Path) -> set[int]:
    return {i for step, i, _ in steps(log) if step == "end"}


def stop(worker: Any, log: Path) -> None:
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, log.read_text()


def assert_timed_out(queue: Any, job_id: int) -> None:
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts) == ("dead", 1), snap
    assert f"timed out after {LIMIT:g} s" in snap.last_error, snap.last_error


def enqueue_stuck_then_short(queue: Any, kind: str, short: str, log: Path, **payload: Any) -> Any:
    """One job whose handler will not end by itself, then two short ones behind it."""
    stuck = queue.enqueue(kind, {"log": str(log), **payload}, max_attempts=1).id
    behind = [queue.enqueue(short, {"log": str(log)}).id for _ in range(2)]
    return stuck, behind


# --- W8: a handler process past its limit is killed; its job fails; the next job runs


@pytest.mark.parametrize(
    ("registry", "kind", "short"),
    [("SYNC", "hang", "note"), ("ASYNC", "async-hang", "async-note")],
    ids=["sync", "async"],
)
def test_w8_a_handler_past_its_limit_is_stopped_and_the_jobs_behind_it_run(
    make_queue, dsn, tmp_path, registry, kind, short
):
    """`async-hang` is an `async def` handler on the loop process: its task is cancelled.
    `hang` is a sync handler in its handler process: the process is killed."""
    queue = make_queue(clock=None)
    handlers = tmp_path / "handlers.log"
    stuck, behind = enqueue_stuck_then_short(queue, kind, short, handlers)
    log = tmp_path / "worker.log"
    command = ("worker", f"tests.worker.limited_handlers:{registry}", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(settled(queue, stuck, *behind), worker, log, timeout=60)
        stop(worker, log)
    assert_timed_out(queue, stuck)
    assert [queue.get(i).state for i in behind] == ["done", "done"]
    assert ended(handlers) == set(behind)  # the stuck handler never got to its end
    first = started(handlers, stuck)
    nxt = started(handlers, behind[0])
    assert first is not None and nxt is not None
    print(f"\n{kind}: limit to the next job's start: {nxt - first - LIMIT:.3f} s")


def test_w8_an_async_task_that_ignores_its_cancel_has_its_process_killed(make_queue, dsn, tmp_path):
    """`async-stubborn` swallows its cancel: its loop process is killed, its job fails
    as timed out, and the worker goes on in a new loop process."""
    queue = make_queue(clock=None)
    handlers = tmp_path / "handlers.log"
    stuck, behind = enqueue_stuck_then_short(queue, "async-stubborn", "async-note", handlers)
    log = tmp_path / "worker.log"
    command = ("worker", "tests.worker.limited_handlers:ASYNC", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(settled(queue, stuck, *behind), worker, log, timeout=60)
        stop(worker, log)
    assert_timed_out(queue, stuck)
    assert "was killed" in queue.get(stuck).last_error
    assert [queue.get(i).state for i in behind] == ["done", "done"]
    assert ended(handlers) == set(behind)


def test_w8_the_worker_timeout_limits_kinds_without_their_own(make_queue, dsn, tmp_path):
    """`--timeout` reaches `deaf`, a kind registered without a limit."""
    queue = make_queue(clock=None)
    handlers = tmp_path / "handlers.log"
    stuck, behind = enqueue_stuck_then_short(queue, "deaf", "note", handlers)
    log = tmp_path / "worker.log"
    command = ("worker", "tests.worker.limited_handlers:SYNC", "--timeout", "1", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(settled(queue, stuck, *behind), worker, log, timeout=60)
        stop(worker, log)
    snap = queue.get(stuck)
    assert snap.state == "dead" and "timed out after 1 s" in snap.last_error, snap
    assert [queue.get(i).state for i in behind] == ["done", "done"]


def test_w8_an_in_process_worker_stops_waiting_at_the_limit(make_queue, tmp_path):
    """The handler's thread cannot be killed: the slot marks the lease lost, fails the
    job and takes the next; the handler ends by itself later (here after 20 s)."""
    queue = make_queue(clock=None)
    handlers = tmp_path / "handlers.log"
    stuck, behind = enqueue_stuck_then_short(queue, "hang", "note", handlers, seconds=20)
    Worker(queue, SYNC, poll_interval=0.05, exit_when_idle=0).run()
    assert_timed_out(queue, stuck)
    assert [queue.get(i).state for i in behind] == ["done", "done"]
    assert ended(handlers) == set(behind)


def test_w8_an_in_process_async_worker_cancels_the_task_at_the_limit(dsn, tmp_path):
    handlers = tmp_path / "handlers.log"
    with queuecore.connect(dsn) as queue:
        stuck, behind = enqueue_stuck_then_short(queue, "async-hang", "async-note", handlers)

        async def drain() -> None:
            async with queuecore.connect_async(dsn) as aqueue:
                worker = AsyncWorker(aqueue, ASYNC, poll_interval=0.05, exit_when_idle=0)
                await asyncio.wait_for(worker.run(handle_signals=False), PATIENCE)

        asyncio.run(drain())
        assert_timed_out(queue, stuck)
        assert [queue.get(i).state for i in behind] == ["done", "done"]
    assert ended(handlers) == set(behind)


def test_w8_a_handler_within_its_limit_is_not_stopped(make_queue):
    """A limit costs a handler that keeps to it nothing: its job is done, its result kept."""
    queue = make_queue(clock=None)
    registry = queuecore.Registry()
    registry.add("quick", lambda job: {"n": job.payload["n"]}, timeout=30)
    job_id = queue.enqueue("quick", {"n": 7}).id
    Worker(queue, registry, poll_interval=0.05, exit_when_idle=0).run()
    snap = queue.get(job_id)
    assert (snap.state, snap.result) == ("done", {"n": 7}), snap


def test_w8_a_limit_must_be_positive():
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        queuecore.Registry().add("k", lambda job: None, timeout=0)


# --- W9's stopping half: a handler deaf to its lost lease is killed after the grace


def test_w9_a_deaf_handler_is_killed_after_the_cancel_grace_and_the_next_job_starts(
    make_queue, dsn, tmp_path
):
    """Today's worker hears of a cancel at its next heartbeat (lease/3): a lease of 3 s
    keeps this test short. The grace counts from the moment the slot sees the lease
    lost, whoever marked it so."""
    lease = 3.0
    queue = make_queue(clock=None, lease_seconds=lease)
    handlers = tmp_path / "handlers.log"
    deaf, behind = enqueue_stuck_then_short(queue, "deaf", "note", handlers)
    log = tmp_path / "worker.log"
    command = ("worker", "tests.worker.limited_handlers:SYNC", "--dsn", dsn)
    options = ("--lease-seconds", str(lease), "--cancel-grace", "1")
    with queuecore_process(*command, *options, log=log) as worker:
        wait_until(lambda: started(handlers, deaf) is not None, worker, log)
        cancelled_at = time.time()
        assert queue.cancel(deaf)
        wait_until(settled(queue, *behind), worker, log, timeout=60)
        stop(worker, log)
    assert queue.get(deaf).state == "cancelled"
    assert [queue.get(i).state for i in behind] == ["done", "done"]
    assert ended(handlers) == set(behind)  # the deaf handler was stopped, not let finish
    assert "stopped after the cancel grace" in log.read_text(), log.read_text()
    nxt = started(handlers, behind[0])
    assert nxt is not None
    print(f"\ncancel to the next job's start (heartbeat + 1 s grace): {nxt - cancelled_at:.3f} s")


# --- W10: whatever the payload, only its own job fails


def store_payload_text(db: sa.Engine, job_id: int, text: str, *, json_column: bool) -> None:
    """Give a job stored payload text that `enqueue` would refuse, as a row written by
    hand, damaged, or written before R29 capped the depth could hold. MariaDB's JSON
    column checks its text with JSON_VALID, so there the column becomes plain text first;
    PostgreSQL's stays JSONB when `json_column` (the text is JSON), and becomes text when
    not. The worker must hold whatever a row holds."""
    postgres = db.dialect.name == "postgresql"
    with db.begin() as conn:
        if db.dialect.name == "mariadb":
            conn.execute(sa.text("ALTER TABLE queuecore_jobs MODIFY payload LONGTEXT NOT NULL"))
        elif postgres and not json_column:
            conn.execute(sa.text("ALTER TABLE queuecore_jobs ALTER COLUMN payload TYPE TEXT"))
        value = "CAST(:payload AS JSONB)" if postgres and json_column else ":payload"
        conn.execute(
            sa.text(f"UPDATE queuecore_jobs SET payload = {value} WHERE id = :id"),
            {"payload": text, "id": job_id},
        )


def store_nested(db: sa.Engine, job_id: int, depth: int, log: Path) -> None:
    """Give a job a payload nested `depth` levels, as queuecore accepted before R29 capped
    the depth at 31."""
    nested = "0"
    for _ in range(depth - 1):
        nested = f"[{nested}]"
    text = f'{{"log": {json.dumps(str(log))}, "deep": {nested}}}'
    store_payload_text(db, job_id, text, json_column=True)


def enqueue_nested_then_short(
    queue: Any, db: sa.Engine, echo: str, short: str, log: Path
) -> tuple[list[int], list[int]]:
    nested = [queue.enqueue(echo, {"log": str(log)}, max_attempts=1).id for _ in DEPTHS]
    for job_id, depth in zip(nested, DEPTHS, strict=True):
        store_nested(db, job_id, depth, log)
    behind = [queue.enqueue(short, {"log": str(log)}).id for _ in range(2)]
    return nested, behind


#: A W10 test runs with each registry: its handler that echoes the payload, and a short one.
BOTH_REGISTRIES = pytest.mark.parametrize(
    ("registry", "echo", "short"),
    [("SYNC", "echo", "note"), ("ASYNC", "async-echo", "async-note")],
    ids=["sync", "async"],
)


def assert_failed_naming_the_cause(queue: Any, nested: list[int], behind: list[int]) -> None:
    """Each deep job is dead with an error that says why: its handler's result could
    not be stored (R29), or the job could not be handed to its handler process."""
    for job_id in nested:
        snap = queue.get(job_id)
        assert (snap.state, snap.attempts) == ("dead", 1), snap
        error = snap.last_error
        assert "nested more than 31 levels" in error or "cannot be sent to its handler" in error, (
            error
        )
    assert [queue.get(i).state for i in behind] == ["done", "done"]


@pytest.fixture
def own_database(harness: Any, private_dsn: str) -> Iterator[tuple[str, Any, sa.Engine]]:
    """A database of the test's own (DSN, queue, plain engine), for a test that alters
    the jobs table: the database the other tests of this process share must keep its
    JSON column."""
    db = harness.engine(private_dsn)
    with queuecore.connect(private_dsn) as queue:
        yield private_dsn, queue, db
    db.dispose()


@BOTH_REGISTRIES
def test_w10_deeply_nested_payloads_fail_their_own_jobs_and_the_worker_lives(
    own_database, tmp_path, registry, echo, short
):
    dsn, queue, db = own_database
    handlers = tmp_path / "handlers.log"
    nested, behind = enqueue_nested_then_short(queue, db, echo, short, handlers)
    log = tmp_path / "worker.log"
    command = ("worker", f"tests.worker.limited_handlers:{registry}", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(settled(queue, *nested, *behind), worker, log, timeout=60)
        assert worker.poll() is None, log.read_text()
        stop(worker, log)
    assert_failed_naming_the_cause(queue, nested, behind)
    assert "stopping the worker" not in log.read_text()


def test_w10_deeply_nested_payloads_in_an_in_process_worker(own_database, tmp_path):
    _, queue, db = own_database
    handlers = tmp_path / "handlers.log"
    nested, behind = enqueue_nested_then_short(queue, db, "echo", "note", handlers)
    done = threading.Event()

    def run() -> None:
        Worker(queue, SYNC, poll_interval=0.05, exit_when_idle=0).run()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(PATIENCE), "the worker did not drain"
    assert_failed_naming_the_cause(queue, nested, behind)


@BOTH_REGISTRIES
def test_w10_a_stored_payload_that_is_not_json_fails_its_own_job_naming_why(
    own_database, tmp_path, registry, echo, short
):
    """The worker hands the stored text on undecoded: the handler that reads it fails,
    not every claim that meets the row (which would stop the queue for everyone)."""
    dsn, queue, db = own_database
    handlers = tmp_path / "handlers.log"
    damaged = queue.enqueue(echo, {"log": str(handlers)}, max_attempts=1).id
    behind = [queue.enqueue(short, {"log": str(handlers)}).id for _ in range(2)]
    store_payload_text(db, damaged, '{"log": not json', json_column=False)
    log = tmp_path / "worker.log"
    command = ("worker", f"tests.worker.limited_handlers:{registry}", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(settled(queue, damaged, *behind), worker, log, timeout=60)
        assert worker.poll() is None, log.read_text()
        stop(worker, log)
    snap = queue.get(damaged)
    assert (snap.state, snap.attempts) == ("dead", 1)
    assert f"ValueError: job {damaged}'s stored payload is not JSON" in snap.last_error
    assert [queue.get(i).state for i in behind] == ["done", "done"]


def test_w10_a_stored_payload_that_is_not_json_shows_as_its_text_in_every_view(
    own_database, capsys
):
    """A damaged row is shown, not raised on: `get`, the lists, and `queuecore show`
    (the dashboard's job page reads `get`) give its text under NOT_JSON, and the rows
    around it as they are. A driver's JSON decoding had raised, taking the whole
    listing with it."""
    dsn, queue, db = own_database
    damaged, fine = queue.enqueue_many("k", [{"a": 1}, {"b": [1, 2.5, None, "x"]}])
    store_payload_text(db, damaged, "{not json", json_column=False)
    shown = {NOT_JSON: "{not json"}
    assert queue.get(damaged).payload == shown
    assert [s.payload for s in queue.list_jobs()] == [shown, {"b": [1, 2.5, None, "x"]}]
    assert queue.list_jobs(state="queued", after_id=damaged)[0].id == fine
    assert main(["show", str(damaged), "--dsn", dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["payload"] == shown
