"""`queuecore worker` with a registry of `async def` handlers (tests.worker.async_handlers),
as real processes on both backends: its slots' jobs run as tasks of one handler
process's event loop (ADR 0011), with W4 (a real SIGTERM), W7 (a handler that kills its
process) and W3 (a lost lease heard on the loop). Leases are long where a prompt failure
must come from the worker seeing the crash; no timing is asserted, only generous
deadlines."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.worker.processes import (
    REPO,
    claim_while_frozen,
    queuecore_env,
    queuecore_process,
    wait_until,
)

REGISTRY = "tests.worker.async_handlers:REGISTRY"
WORKER = ("worker", REGISTRY, "--queues", "async")
LONG_LEASE = ("--lease-seconds", "300")
FOREVER_MS = str(3600 * 1000)  # an ack wait that never runs out: only a stop flushes


def started_file(tmp_path: Path, name: str) -> tuple[Path, dict[str, str]]:
    path = tmp_path / name
    return path, {"started": str(path)}


def stop_cleanly(worker: subprocess.Popen[bytes], log: Path) -> None:
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, log.read_text()


def assert_done_uncharged(queue: Any, job_id: int) -> None:
    """Done on its first charged attempt, with no error: any crash beside it was not its."""
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap


def test_w4_sigterm_lets_running_async_handlers_finish_releases_the_rest_exits_0(
    make_queue, dsn, tmp_path
):
    queue = make_queue(clock=None)
    starts = [tmp_path / f"started-{i}" for i in range(2)]
    slow = [
        queue.enqueue("async-slow", {"started": str(p), "seconds": 1.5}, queue="async").id
        for p in starts
    ]
    noted = {"ran": str(tmp_path / "ran")}
    ahead = [queue.enqueue("async-noted", noted, queue="async", priority=1).id]
    ahead += [queue.enqueue("sync-beside", {}, queue="async", priority=1).id]
    log = tmp_path / "worker.log"
    options = ("--concurrency", "2", "--prefetch", "2", "--dsn", dsn)
    with queuecore_process(*WORKER, *options, log=log) as worker:
        wait_until(lambda: all(p.exists() for p in starts), worker, log)
        # Both slow handlers run at once on the loop; the two claimed ahead wait (the
        # claim ahead may come a moment after the handlers started, on a loaded machine).
        wait_until(lambda: [queue.get(i).state for i in ahead] == ["running"] * 2, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    assert [(queue.get(i).state, queue.get(i).attempts) for i in slow] == [("done", 1)] * 2
    assert [(queue.get(i).state, queue.get(i).attempts) for i in ahead] == [("queued", 0)] * 2
    assert "SIGTERM" in log.read_text()


def test_w4_sigterm_to_an_asyncio_app_running_an_async_worker(make_queue, dsn, tmp_path):
    """`AsyncWorker.run()` on an application's main thread handles SIGTERM on its loop:
    the running handler finishes, the jobs claimed ahead are released, exit 0."""
    queue = make_queue(clock=None)
    started = tmp_path / "started"
    slow = queue.enqueue("async-slow", {"started": str(started), "seconds": 1.5}).id
    ahead = [queue.enqueue("sync-beside", {}, priority=1).id for _ in range(2)]
    log = tmp_path / "app.log"
    with open(log, "ab") as out:
        app = subprocess.Popen(
            [sys.executable, "-m", "tests.worker.async_app", dsn],
            cwd=REPO,
            env=queuecore_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(started.exists, app, log)
        assert [queue.get(i).state for i in ahead] == ["running", "running"]
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=60) == 0, log.read_text()
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    assert (queue.get(slow).state, queue.get(slow).attempts) == ("done", 1)
    assert [(queue.get(i).state, queue.get(i).attempts) for i in ahead] == [("queued", 0)] * 2
    assert "SIGTERM" in log.read_text() and "exited cleanly" in log.read_text()


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("sigkill", "was killed by SIGKILL"),
        ("segfault", "was killed by SIGSEGV"),
        ("exit", "exited with code 3"),
    ],
)
def test_w7_an_async_handler_that_kills_its_process_charges_only_the_jobs_running_in_it(
    make_queue, dsn, tmp_path, how, named
):
    """Three jobs returned first (their completions wait in the ack window); then one
    handler runs beside the crashing one on the same loop, and is charged with it (the
    jobs running in that process, W7); the returned ones are not, and the worker goes on
    in a new handler process."""
    queue = make_queue(clock=None)
    returned = {
        queue.enqueue("async-noted", {"ran": str(tmp_path / f"ran-{i}")}, queue="async").id: (
            tmp_path / f"ran-{i}"
        )
        for i in range(3)
    }
    beside_started, beside = started_file(tmp_path, "beside")
    beside["gate"] = str(tmp_path / "never")
    running = queue.enqueue("async-gate", beside, queue="async", priority=1, max_attempts=1).id
    crash = {"how": how, "wait": str(beside_started)}
    crashing = queue.enqueue("async-crash", crash, queue="async", priority=1, max_attempts=1).id
    log = tmp_path / "worker.log"
    window = ("--ack-batch", "1000", "--ack-ms", FOREVER_MS, "--concurrency", "2")
    with queuecore_process(*WORKER, *window, *LONG_LEASE, "--dsn", dsn, log=log) as worker:
        wait_until(lambda: queue.get(crashing).state == "dead", worker, log, timeout=60)
        snap = queue.get(crashing)
        assert (snap.state, snap.attempts) == ("dead", 1), snap
        assert named in snap.last_error and "handler process" in snap.last_error, snap.last_error
        assert snap.last_error.endswith("while running the handler"), snap.last_error
        wait_until(lambda: queue.get(running).state == "dead", worker, log)
        assert named in queue.get(running).last_error, queue.get(running).last_error
        # The handlers that had returned wait in the window, uncharged and still held.
        assert [queue.get(i).state for i in returned] == ["running"] * 3

        ran = tmp_path / "ran-after"  # the worker goes on, in a new handler process
        after = queue.enqueue("async-noted", {"ran": str(ran)}, queue="async").id
        wait_until(ran.exists, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    for job_id in [*returned, after]:
        snap = queue.get(job_id)
        assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap


def test_w7_a_job_sent_to_the_loop_process_but_not_begun_is_not_charged_for_its_crash(
    make_queue, dsn, tmp_path
):
    """The crashing handler holds the loop (a blocking wait, no await) while the worker
    sends the process another job, which therefore never begins there: after the crash
    it runs in the next handler process, its attempt uncharged."""
    queue = make_queue(clock=None)
    blocking, go = tmp_path / "blocking", tmp_path / "go"
    crash = {"how": "exit", "blocking": str(blocking), "block_until": str(go)}
    crashing = queue.enqueue("async-crash", crash, queue="async", max_attempts=1).id
    log = tmp_path / "worker.log"
    options = ("--concurrency", "2", *LONG_LEASE, "--dsn", dsn)
    with queuecore_process(*WORKER, *options, log=log) as worker:
        wait_until(blocking.exists, worker, log)
        ran = tmp_path / "ran"
        innocent = queue.enqueue("async-noted", {"ran": str(ran)}, queue="async").id
        wait_until(lambda: queue.get(innocent).state == "running", worker, log)
        time.sleep(0.5)  # lets the slot send it (were it not sent, it would pass anyway)
        go.touch()
        wait_until(lambda: queue.get(innocent).state == "done", worker, log)
        stop_cleanly(worker, log)
    assert "exited with code 3" in queue.get(crashing).last_error
    assert_done_uncharged(queue, innocent)


def test_w7_a_job_whose_async_handler_returned_is_not_charged_for_a_crash_before_its_outcome_went(
    make_queue, dsn, tmp_path
):
    """The loop process keeps a returned job's outcome a moment, to send several in one
    message; the next job, sent with it, kills the process at once, before it went. The
    first job's ticket is in the memory the process shares with the worker, so it is
    given back uncharged and runs again (W7: a job whose handler had returned is never
    charged), while the crashing one fails."""
    queue = make_queue(clock=None)
    ran = tmp_path / "ran"
    returned = queue.enqueue("async-noted", {"ran": str(ran)}, queue="async", max_attempts=1).id
    crash = {"how": "exit"}
    crashing = queue.enqueue("async-crash", crash, queue="async", max_attempts=1).id
    log = tmp_path / "worker.log"
    options = ("--prefetch", "2", *LONG_LEASE, "--dsn", dsn)
    with queuecore_process(*WORKER, *options, log=log) as worker:
        wait_until(lambda: queue.get(returned).state == "done", worker, log)
        stop_cleanly(worker, log)
    assert "exited with code 3" in queue.get(crashing).last_error
    assert_done_uncharged(queue, returned)
    said = "1 job(s) had returned in handler process"
    assert said in log.read_text(), log.read_text()


def test_w3_an_async_handler_in_its_process_hears_that_its_lease_was_lost(
    make_queue, dsn, tmp_path
):
    lease = 1.0
    queue = make_queue(clock=None, lease_seconds=lease)
    started, seen = tmp_path / "started", tmp_path / "seen"
    payload = {"started": str(started), "seen": str(seen), "seconds": 60}
    job_id = queue.enqueue("async-watch-lease", payload, queue="async").id
    log = tmp_path / "worker.log"
    leases = ("--lease-seconds", str(lease))
    with queuecore_process(*WORKER, *leases, "--dsn", dsn, log=log) as worker:
        wait_until(started.exists, worker, log)
        stolen = claim_while_frozen(worker, lambda: queue.claim("thief", queues=["async"]), lease)
        assert [j.id for j in stolen] == [job_id]
        wait_until(seen.exists, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    assert seen.read_text() == "lost"  # the asyncio twin and the threading event both
    snap = queue.get(job_id)
    assert (snap.state, snap.worker, snap.attempts) == ("running", "thief", 2)


def test_a_mixed_registry_runs_async_handlers_together_and_sync_ones_on_threads(
    make_queue, dsn, tmp_path
):
    """Two gated async handlers both begin before the gate opens (two tasks of one loop
    at once); a sync handler beside them runs on a thread of the handler process; an
    effect returned by an async handler commits once with its completion."""
    from queuecore.demo.jobs import ledger

    queue = make_queue(clock=None)
    ledger.create(queue.engine, checkfirst=True)
    gate = tmp_path / "gate"
    starts = [tmp_path / f"started-{i}" for i in range(2)]
    gated = [
        queue.enqueue("async-gate", {"started": str(p), "gate": str(gate)}, queue="async").id
        for p in starts
    ]
    sync = queue.enqueue("sync-beside", {}, queue="async", priority=1).id
    ran = tmp_path / "recorded"
    recorded = queue.enqueue("async-recorded", {"ran": str(ran)}, queue="async", priority=1).id
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--concurrency", "2", "--dsn", dsn, log=log) as worker:
        wait_until(lambda: all(p.exists() for p in starts), worker, log)
        gate.touch()
        wait_until(lambda: queue.get(recorded).state == "done", worker, log)
        wait_until(lambda: queue.get(sync).state == "done", worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    assert [(queue.get(i).state, queue.get(i).attempts) for i in gated] == [("done", 1)] * 2
    result = queue.get(sync).result
    assert result["thread"] != "MainThread" and result["lost"] is False, result
    with queue.engine.connect() as conn:
        rows = conn.execute(ledger.select().where(ledger.c.job_id == recorded)).all()
    assert len(rows) == 1
