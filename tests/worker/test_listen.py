"""W6 on PostgreSQL: an enqueue wakes an idle worker through NOTIFY, long before its
poll interval would have."""

from __future__ import annotations

import threading
import time

import pytest

from queuecore import Worker

POLL_INTERVAL = 30.0


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_w6_an_idle_worker_is_woken_by_notify_well_before_its_poll_interval(make_queue):
    queue = make_queue(clock=None)
    done = threading.Event()
    worker = Worker(queue, {"ping": lambda job: done.set()}, poll_interval=POLL_INTERVAL)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not worker.listening:  # its own NOTIFY came back: it now waits 30 s between polls
            assert time.monotonic() < deadline, "the worker never confirmed LISTEN works"
            time.sleep(0.01)
        time.sleep(0.2)  # let it settle into its long wait
        enqueued = time.monotonic()
        queue.enqueue("ping", {})
        assert done.wait(10), "the job waited for the poll interval: NOTIFY did not wake it"
        assert time.monotonic() - enqueued < POLL_INTERVAL / 3
    finally:
        worker.stop()
        thread.join(timeout=30)
