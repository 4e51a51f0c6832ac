"""W4 with a real process and a real signal: SIGTERM lets the running handler finish,
gives back the jobs claimed ahead without burning their attempt, and exits 0."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from tests.worker.processes import queuecore_process, wait_until

WORKER = ("worker", "tests.worker.handlers:REGISTRY")


def test_w4_sigterm_finishes_the_running_job_releases_the_rest_and_exits_0(
    make_queue, dsn, tmp_path
):
    queue = make_queue(clock=None)  # the worker process reads the real clock
    started = tmp_path / "started"
    slow = queue.enqueue("slow", {"started": str(started), "seconds": 1.5}, priority=0).id
    ahead = [queue.enqueue("quick", {}, priority=1).id for _ in range(2)]
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--dsn", dsn, "--prefetch", "2", log=log) as worker:
        wait_until(started.exists, worker, log)
        # The slow one runs, the other two are claimed and wait for the slot (in the
        # first claim, or, on a loaded machine, in the one right after it).
        wait_until(lambda: [queue.get(i).state for i in ahead] == ["running"] * 2, worker, log)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    assert queue.get(slow).state == "done"
    assert [(queue.get(i).state, queue.get(i).attempts) for i in ahead] == [("queued", 0)] * 2
    assert "SIGTERM" in log.read_text()


def test_w4_sigint_is_a_graceful_stop_too(dsn, tmp_path):
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--dsn", dsn, log=log) as worker:
        wait_until(lambda: "started:" in log.read_text(), worker, log)
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0, log.read_text()


def test_w4_a_worker_stopped_when_sigterm_arrives_stops_gracefully_once_continued(dsn, tmp_path):
    # Signalled while stopped, the process may take SIGTERM on any thread, not the main one.
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, "--dsn", dsn, "--concurrency", "4", log=log) as worker:
        wait_until(lambda: "started:" in log.read_text(), worker, log)
        worker.send_signal(signal.SIGSTOP)
        worker.send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGCONT)
        assert worker.wait(timeout=30) == 0, log.read_text()


def alive(pid: int) -> bool:
    """Whether the process runs: not gone, and not dead awaiting its parent's wait."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize(
    "registry, kind",
    [
        ("tests.worker.handlers:REGISTRY", "hogs"),
        ("tests.worker.async_handlers:REGISTRY", "async-hogs"),
    ],
    ids=["handler-process", "loop-process"],
)
def test_w4_a_handler_still_running_past_the_grace_stops_before_its_worker_exits(
    make_queue, dsn, tmp_path, registry, kind
):
    # The handler holds its process's interpreter lock, so that process's own thread
    # cannot end it when the worker's socket closes: only the worker's kill can. Left
    # running, it would do its job's work while another worker runs the job again.
    queue = make_queue(clock=None)
    pid_file = tmp_path / "pid"
    job = queue.enqueue(kind, {"pid": str(pid_file)}).id
    log = tmp_path / "worker.log"
    with queuecore_process(
        "worker", registry, "--dsn", dsn, "--grace-seconds", "0.2", log=log
    ) as worker:
        wait_until(pid_file.exists, worker, log)
        handler = int(pid_file.read_text())
        try:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0, log.read_text()
            assert not alive(handler), log.read_text()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(handler, signal.SIGKILL)
    # Its work stopped; the job waits for its lease to hand it on, as W4 says.
    assert queue.get(job).state == "running"
    assert "1 job(s) still running at exit, their handlers stopped" in log.read_text()
