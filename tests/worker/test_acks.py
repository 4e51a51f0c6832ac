"""The ack window on both backends: completions commit in batches, at N or after T, a
raising effect fails only its own job, a stop flushes, and a SIGKILL with completions in
the window only makes their jobs run again. No timing is asserted: T is shown by the
window flushing while the worker still runs, with a generous deadline."""

from __future__ import annotations

import signal
import time

import pytest

from queuecore import Worker
from tests.faults.helpers import wait_until
from tests.worker.processes import queuecore_process
from tests.worker.processes import wait_until as wait_for_process
from tests.worker.test_worker import Background, drain, effect_rows, write_effect

__all__ = ["effect_rows"]  # a fixture of these tests

FOREVER = 3600.0  # an ack wait that never runs out during a test: only N or a stop flush
WORKER = ("worker", "tests.worker.handlers:REGISTRY", "--queues", "acks")


def test_the_window_flushes_when_it_holds_n_completions(queue):
    ran: list[int] = []
    handlers = {"note": lambda job: ran.append(job.id)}
    ids = [queue.enqueue("note", {}, priority=i).id for i in range(4)]
    worker = Worker(queue, handlers, ack_batch=3, ack_seconds=FOREVER, poll_interval=0.05)
    background = Background(worker)
    try:
        wait_until(lambda: [queue.get(i).state for i in ids[:3]] == ["done"] * 3, "N = 3 flush")
        wait_until(lambda: ids[3] in ran, "the fourth handler to run")
        assert queue.get(ids[3]).state == "running"  # alone in the window, lease held
    finally:
        background.stop()
    assert queue.get(ids[3]).state == "done"  # the stop flushed it


def test_the_window_flushes_after_t_without_reaching_n(queue):
    ids = [queue.enqueue("note", {}).id for _ in range(2)]
    worker = Worker(queue, {"note": lambda job: None}, ack_batch=1000, ack_seconds=0.2)
    background = Background(worker)
    try:
        wait_until(lambda: [queue.get(i).state for i in ids] == ["done"] * 2, "a T flush")
    finally:
        background.stop()


def test_a_raising_effect_fails_only_its_own_job_in_the_batch(queue, effect_rows):
    def write(job):
        if job.payload.get("bad"):

            def half_effect(conn):
                write_effect(job)(conn)
                raise RuntimeError("constraint violated")

            return half_effect
        return write_effect(job)

    ids = [queue.enqueue("write", {"bad": i == 2}, priority=i).id for i in range(5)]
    bad = ids.pop(2)
    drain(queue, {"write": write}, ack_batch=5, ack_seconds=FOREVER)

    snap = queue.get(bad)
    assert (snap.state, snap.attempts) == ("queued", 1)
    assert snap.last_error.startswith("RuntimeError: constraint violated")
    assert [queue.get(i).state for i in ids] == ["done"] * 4
    assert effect_rows() == ids  # one row each, none of the failed job's half


def enqueue_noted(queue, tmp_path, count):
    """Jobs whose handler touches a file when it ran and returns no effect: their
    completions wait in the worker's window (a handler process commits an effect itself)."""
    return {
        queue.enqueue("noted", {"ran": str(tmp_path / f"ran-{i}")}, queue="acks").id: (
            tmp_path / f"ran-{i}"
        )
        for i in range(count)
    }


def test_sigterm_flushes_the_window_before_exiting(make_queue, dsn, tmp_path):
    queue = make_queue(clock=None)
    jobs = enqueue_noted(queue, tmp_path, 3)
    log = tmp_path / "worker.log"
    window = ("--ack-batch", "1000", "--ack-ms", str(FOREVER * 1000))
    with queuecore_process(*WORKER, *window, "--dsn", dsn, log=log) as worker:
        wait_for_process(lambda: all(p.exists() for p in jobs.values()), worker, log)
        assert [queue.get(i).state for i in jobs] == ["running"] * 3  # in the window
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    assert [(queue.get(i).state, queue.get(i).attempts) for i in jobs] == [("done", 1)] * 3
    assert log.read_text().count(" done in ") == 3  # one line per job outcome


@pytest.mark.slow
def test_sigkill_loses_only_the_window_and_its_jobs_run_again_once(make_queue, dsn, tmp_path):
    lease = 3.0
    queue = make_queue(clock=None)
    jobs = enqueue_noted(queue, tmp_path, 3)
    log = tmp_path / "worker.log"
    window = ("--ack-batch", "1000", "--ack-ms", str(FOREVER * 1000))
    leases = ("--lease-seconds", str(lease))
    with queuecore_process(*WORKER, *window, *leases, "--dsn", dsn, log=log) as worker:
        wait_for_process(lambda: all(p.exists() for p in jobs.values()), worker, log)
        # Waiting in the window past a lease's length, the jobs are still held: heartbeats.
        time.sleep(lease * 1.5)
        assert queue.claim("thief", queues=["acks"]) == []
        worker.kill()
        worker.wait()
    assert [(queue.get(i).state, queue.get(i).attempts) for i in jobs] == [("running", 1)] * 3
    for path in jobs.values():
        path.unlink()

    with queuecore_process(*WORKER, *leases, "--dsn", dsn, log=log) as worker:
        wait_for_process(lambda: all(queue.get(i).state == "done" for i in jobs), worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    assert all(p.exists() for p in jobs.values())  # they ran again
    assert [queue.get(i).attempts for i in jobs] == [2] * 3
