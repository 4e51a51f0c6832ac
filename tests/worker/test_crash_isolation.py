"""W7 with real `queuecore worker` processes: a handler that kills its process (SIGKILL,
a segfault, os._exit) takes only its own job with it. That job is failed at once with an
error naming the exit; the leases are 300 s long, so nothing but the worker seeing the
crash can explain a prompt failure (no timing is asserted, only a generous deadline).
Jobs whose handlers had returned are never charged, and the worker goes on."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from tests.worker.processes import claim_while_frozen, queuecore_process, wait_until

LONG_LEASE = ("--lease-seconds", "300")
WORKER = ("worker", "tests.worker.handlers:REGISTRY", "--queues", "crash", *LONG_LEASE)
FOREVER_MS = str(3600 * 1000)  # an ack wait that never runs out: only a stop flushes


def settled(queue, job_id):
    return lambda: queue.get(job_id).state in ("dead", "done")


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("sigkill", "was killed by SIGKILL"),
        ("segfault", "was killed by SIGSEGV"),
        ("exit", "exited with code 3"),
    ],
)
def test_w7_a_handler_that_kills_its_process_is_failed_at_once_naming_the_exit(
    make_queue, dsn, tmp_path, how, named
):
    queue = make_queue(clock=None)
    returned = {
        queue.enqueue("noted", {"ran": str(tmp_path / f"ran-{i}")}, queue="crash").id: (
            tmp_path / f"ran-{i}"
        )
        for i in range(3)
    }
    crashing = queue.enqueue("crash", {"how": how}, queue="crash", priority=1, max_attempts=1).id
    log = tmp_path / "worker.log"
    window = ("--ack-batch", "1000", "--ack-ms", FOREVER_MS)
    with queuecore_process(*WORKER, *window, "--dsn", dsn, log=log) as worker:
        wait_until(settled(queue, crashing), worker, log, timeout=60)
        snap = queue.get(crashing)
        assert (snap.state, snap.attempts) == ("dead", 1), snap
        assert named in snap.last_error and "handler process" in snap.last_error, snap.last_error
        assert snap.last_error.endswith("while running the handler"), snap.last_error
        # The handlers that had returned wait in the window, uncharged and still held.
        assert [queue.get(i).state for i in returned] == ["running"] * 3

        ran = tmp_path / "ran-after"  # the worker goes on, in a new handler process
        after = queue.enqueue("noted", {"ran": str(ran)}, queue="crash").id
        wait_until(ran.exists, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    for job_id in [*returned, after]:
        snap = queue.get(job_id)
        assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap


def test_w7_a_handler_process_that_dies_in_its_effect_is_charged_naming_the_effect(
    make_queue, dsn, tmp_path
):
    # The child commits an effect with the completion itself (R10): dying before that
    # commit is the job's, as its effect is handler code too.
    queue = make_queue(clock=None)
    crashing = queue.enqueue("crash-in-effect", {}, queue="crash", max_attempts=1).id
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--dsn", dsn, log=log) as worker:
        wait_until(settled(queue, crashing), worker, log, timeout=60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    snap = queue.get(crashing)
    assert (snap.state, snap.attempts) == ("dead", 1), snap
    assert (
        "exited with code 3 while running the handler's effect (the completion did not commit)"
        in snap.last_error
    ), snap.last_error


def test_w7_a_crash_with_attempts_left_is_retried_and_counted_once(make_queue, dsn, tmp_path):
    queue = make_queue(clock=None)
    crashing = queue.enqueue("crash", {"how": "exit", "code": 9}, queue="crash").id
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--backoff-cap", "0.2", "--dsn", dsn, log=log) as worker:
        crashes = lambda: log.read_text().count("exited with code 9")  # noqa: E731
        wait_until(lambda: crashes() >= 2, worker, log, timeout=60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    snap = queue.get(crashing)
    assert snap.state in ("queued", "dead") and "exited with code 9" in snap.last_error, snap
    assert snap.attempts == crashes()  # each crash charged one attempt, logged once


def test_w3_a_handler_in_its_process_hears_that_its_lease_was_lost(make_queue, dsn, tmp_path):
    lease = 1.0
    queue = make_queue(clock=None, lease_seconds=lease)
    started, seen = tmp_path / "started", tmp_path / "seen"
    payload = {"started": str(started), "seen": str(seen), "seconds": 60}
    job_id = queue.enqueue("watch-lease", payload, queue="crash").id
    log = tmp_path / "worker.log"
    leases = ("--lease-seconds", str(lease))
    command = ("worker", "tests.worker.handlers:REGISTRY", "--queues", "crash", *leases)
    with queuecore_process(*command, "--dsn", dsn, log=log) as worker:
        wait_until(started.exists, worker, log)
        stolen = claim_while_frozen(worker, lambda: queue.claim("thief", queues=["crash"]), lease)
        assert [j.id for j in stolen] == [job_id]
        wait_until(seen.exists, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    assert seen.read_text() == "lost"
    snap = queue.get(job_id)
    assert (snap.state, snap.worker, snap.attempts) == ("running", "thief", 2)


def test_w7_a_job_whose_handler_returned_is_not_charged_for_a_crash_before_its_outcome_went(
    make_queue, dsn, tmp_path
):
    """A handler process holds a short handler's outcome while the job sent after it
    runs, to send several in one message; that job kills the process before it went.
    The first job's ticket is in the memory the process shares with the worker, so it is
    given back uncharged and runs again (W7: a job whose handler had returned is never
    charged), while the crashing one fails. Held only if the handler took under a
    millisecond, which a loaded machine may deny once: up to three tries, W7 checked in
    each, the held outcome met in one."""
    queue = make_queue(clock=None)
    said = "1 job(s) had returned in handler process"
    for attempt in range(3):
        returned = queue.enqueue("quick", {}, queue="crash", max_attempts=1).id
        crash = {"how": "exit"}
        crashing = queue.enqueue("crash", crash, queue="crash", priority=1, max_attempts=1).id
        log = tmp_path / f"worker-{attempt}.log"
        with queuecore_process(*WORKER, "--prefetch", "2", "--dsn", dsn, log=log) as worker:
            wait_until(settled(queue, crashing), worker, log, timeout=60)
            wait_until(settled(queue, returned), worker, log, timeout=60)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0, log.read_text()
        assert "exited with code 3" in queue.get(crashing).last_error
        snap = queue.get(returned)
        assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap
        if said in log.read_text():
            break
    assert said in log.read_text(), log.read_text()


def test_w7_jobs_claimed_ahead_of_a_crash_are_given_back_uncharged(make_queue, dsn, tmp_path):
    """A prefetch widens what a crash could take: the crashing job's process already
    holds the job after it, and the worker holds more. Only the job whose handler ran is
    charged; the one sent to the process had not started and goes back to the worker's
    holdings, for the next handler process, on the same claim, so every other job ends
    done on attempt 1 with no error."""
    queue = make_queue(clock=None)
    crashing = queue.enqueue("crash", {"how": "sigkill"}, queue="crash", max_attempts=1).id
    ran = {
        queue.enqueue("noted", {"ran": str(tmp_path / f"ran-{i}")}, queue="crash", priority=1).id: (
            tmp_path / f"ran-{i}"
        )
        for i in range(4)
    }
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--prefetch", "4", "--dsn", dsn, log=log) as worker:
        wait_until(lambda: all(path.exists() for path in ran.values()), worker, log, timeout=60)
        wait_until(settled(queue, crashing), worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    snap = queue.get(crashing)
    assert (snap.state, snap.attempts) == ("dead", 1), snap
    assert "was killed by SIGKILL" in snap.last_error, snap.last_error
    for job_id in ran:
        snap = queue.get(job_id)
        assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap
    # One claim took all five; the job sent along with the crashing one went back.
    assert log.read_text().count("had not started: given back, uncharged") == 1, log.read_text()


def descendants(pid: int) -> list[int]:
    """The processes under `pid`, children first, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # gone since the listing
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def exited(pid: int) -> bool:
    """Whether `pid` ended (a zombie until its parent reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_w7_a_job_sent_to_a_handler_process_that_died_idle_is_run_again(make_queue, dsn, tmp_path):
    """A handler process killed while it had nothing to run (the OOM killer, an operator)
    is found dead only when the next job is sent to it: that job never started, so it is
    given back uncharged and runs in the next handler process, instead of staying held,
    its lease renewed, by a slot that forgot it."""
    queue = make_queue(clock=None)
    first = tmp_path / "first"
    queue.enqueue("noted", {"ran": str(first)}, queue="crash")
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--concurrency", "1", "--dsn", dsn, log=log) as worker:
        wait_until(first.exists, worker, log, timeout=60)
        wait_until(lambda: len(descendants(worker.pid)) == 2, worker, log)
        _fork_server, handler_process = descendants(worker.pid)
        os.kill(handler_process, signal.SIGKILL)
        wait_until(lambda: exited(handler_process), worker, log)  # not reaped: idle
        second = tmp_path / "second"
        job_id = queue.enqueue("noted", {"ran": str(second)}, queue="crash").id
        wait_until(settled(queue, job_id), worker, log, timeout=60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None), snap
    assert second.exists()
