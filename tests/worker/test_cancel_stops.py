"""W9 with real `queuecore worker` processes: a cancel stops the work.

- A job the worker claimed ahead and then was cancelled never starts: the worker checks
  the fences of the jobs it hands to a slot, in one read, just before.
- A running handler hears of a cancel within about a second (PostgreSQL: the cancel's
  NOTIFY; elsewhere a poll of the running jobs), not at its next heartbeat: the lease
  here is 300 s, so a heartbeat (every 100 s) cannot explain a prompt `lost`.
- The automatic prefetch, learned from short jobs, does not pile long jobs up in one
  worker while another sits idle: they run on both.

Handler starts are counted in a file the handlers write (`tally`), not in the queue's
tables. No duration is asserted tighter than many seconds of slack."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from queuecore.handling import Lease
from queuecore.observe.observer import Refused, WorkerObserver
from queuecore.testing import make_job
from queuecore.worker.holdings import Holdings
from queuecore.worker.leases import LeaseKeeper, heard
from tests.worker.processes import queuecore_process, wait_until

LONG_LEASE = ("--lease-seconds", "300")
WORKER = ("worker", "tests.worker.handlers:REGISTRY", "--queues", "w9")


def starts(log: Path) -> list[tuple[str, int, int]]:
    """(tag, worker pid, job id) per handler start, in the order they started."""
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(tag, int(pid), int(job_id)) for tag, pid, job_id in rows]


def stop(worker, log: Path) -> None:
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, log.read_text()


def test_w9_jobs_claimed_ahead_and_cancelled_never_start(make_queue, dsn, tmp_path):
    """One slot runs a long job; the four jobs claimed ahead with it are cancelled
    while it runs. None of them starts, and the worker goes on to the next job.
    `--prefetch 5` leaves room for all five in the worker's first claim, even while its
    handler process starts (a starting slot takes one from the room)."""
    queue = make_queue(clock=None)
    tally = tmp_path / "starts"
    long_id = queue.enqueue(
        "tally", {"log": str(tally), "tag": "long", "seconds": 3}, queue="w9"
    ).id
    ahead = [
        queue.enqueue("tally", {"log": str(tally), "tag": "ahead"}, queue="w9", priority=1).id
        for _ in range(4)
    ]
    log = tmp_path / "worker.log"
    prefetch = ("--prefetch", "5")  # held ahead as asked, whatever the handlers take
    with queuecore_process(*WORKER, *prefetch, *LONG_LEASE, "--dsn", dsn, log=log) as worker:
        wait_until(lambda: [s[2] for s in starts(tally)] == [long_id], worker, log)
        # One claim took all five: the four wait in the worker behind the long job, and
        # show as held ahead (no `started_at`) once the long one is noted as started.
        assert [queue.get(i).state for i in ahead] == ["running"] * 4
        wait_until(lambda: queue.get(long_id).started_at is not None, worker, log)
        assert [queue.get(i).started_at for i in ahead] == [None] * 4
        assert (queue.stats("w9")["running"], queue.stats("w9")["held_ahead"]) == (5, 4)
        assert all(queue.cancel(i) for i in ahead)
        after = queue.enqueue("tally", {"log": str(tally), "tag": "after"}, queue="w9").id
        wait_until(lambda: after in [s[2] for s in starts(tally)], worker, log, timeout=60)
        stop(worker, log)
    assert [s[2] for s in starts(tally)] == [long_id, after], log.read_text()
    assert [queue.get(i).state for i in ahead] == ["cancelled"] * 4
    assert queue.get(long_id).state == "done"
    assert log.read_text().count("while claimed ahead: not started") == 4, log.read_text()


def test_w9_a_job_sent_ahead_to_a_handler_process_is_noted_started_only_once_it_begins(
    make_queue,
):
    """A handler process is sent its next jobs with the one it runs, and gives them back
    unstarted if that one runs long: until their handler begins they are held ahead, and
    the lease keeper's round leaves them so (it had noted every job a slot took, and the
    W9 test above then saw a held-ahead job with `started_at` under load)."""
    queue = make_queue(clock=None)
    ids = [queue.enqueue("noop", {}).id for _ in range(2)]
    holdings = Holdings()
    holdings.hand_out(queue.claim("w1", limit=2))
    taken = holdings.take(2, wait=False)
    assert taken is not None and [lease.job.id for lease in taken] == ids
    taken[0].began = True  # the slot saw the first one begin; the second waits behind it
    keeper = LeaseKeeper(queue, holdings, 100.0, threading.Event(), WorkerObserver())
    keeper._note_started()
    assert queue.get(ids[0]).started_at is not None
    assert queue.get(ids[1]).started_at is None
    assert queue.stats()["held_ahead"] == 1
    taken[1].began = True
    keeper._note_started()
    assert queue.get(ids[1]).started_at is not None


def test_w9_a_running_handler_hears_a_cancel_within_seconds(make_queue, dsn, tmp_path):
    """The handler waits on `current_lease().lost`; the lease is 300 s, its heartbeat
    every 100 s, so hearing the cancel within 20 s can only be the cancel's NOTIFY or
    the worker's poll (about a second on every backend; the note measures it)."""
    queue = make_queue(clock=None, lease_seconds=300)
    started, seen = tmp_path / "started", tmp_path / "seen"
    payload = {"started": str(started), "seen": str(seen), "seconds": 120}
    job_id = queue.enqueue("watch-cancel", payload, queue="w9").id
    log = tmp_path / "worker.log"
    with queuecore_process(*WORKER, *LONG_LEASE, "--dsn", dsn, log=log) as worker:
        wait_until(started.exists, worker, log)
        cancelled_at = time.time()
        assert queue.cancel(job_id)
        wait_until(seen.exists, worker, log, timeout=20)
        stop(worker, log)
    heard_after = float(seen.read_text()) - cancelled_at
    assert heard_after < 20, heard_after
    assert queue.get(job_id).state == "cancelled"


def test_w9_long_jobs_spread_over_the_idle_slots_of_two_workers(make_queue, dsn, tmp_path):
    """Worker A (--concurrency 1) learns from 20 short jobs that handlers are quick (an
    automatic prefetch of dozens). Worker B (--concurrency 1) is busy for 2.5 s with a
    job only it serves; meanwhile three 4 s jobs come at once, and A, the idle one,
    claims all three. Before W9 A ran them one after another while B, free again, sat
    idle. Now A releases the two it cannot start soon, and B takes one when it is free:
    the long jobs run on both. 4 s, not the issue's 5: long enough that A is still busy
    with its first when B comes free (2.5 s) and claims."""
    queue = make_queue(clock=None)
    tally = tmp_path / "starts"
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    command = ("worker", "tests.worker.handlers:REGISTRY", "--concurrency", "1", "--dsn", dsn)
    with queuecore_process(*command, "--queues", "w9", log=logs[0]) as worker_a:
        queue.enqueue_many("tally", [{"log": str(tally), "tag": "short"}] * 20, queue="w9")
        wait_until(lambda: len(starts(tally)) == 20, worker_a, logs[0], timeout=60)
        with queuecore_process(*command, "--queues", "w9,w9-b", log=logs[1]) as worker_b:
            busy = {"log": str(tally), "tag": "busy", "seconds": 2.5}
            queue.enqueue("tally", busy, queue="w9-b")
            wait_until(lambda: len(starts(tally)) == 21, worker_b, logs[1], timeout=60)
            time.sleep(0.5)  # B's slot now runs long: it claims nothing ahead for it
            long_job = {"log": str(tally), "tag": "long", "seconds": 4}
            queue.enqueue_many("tally", [long_job] * 3, queue="w9")
            wait_until(lambda: len(starts(tally)) == 24, worker_a, logs[0], timeout=60)
            stop(worker_b, logs[1])
        stop(worker_a, logs[0])
    long_workers = {pid for tag, pid, _ in starts(tally) if tag == "long"}
    assert len(long_workers) == 2, (starts(tally), logs[0].read_text())


def test_w9_a_cancel_heard_twice_is_counted_and_logged_once(caplog):
    """On PostgreSQL a cancel reaches a worker two ways, its NOTIFY and the poll of
    running jobs, on two threads: the second to arrive finds the lease already lost and
    says nothing (the metrics once counted one cancel twice)."""
    refusals: list[str] = []

    class Counting(WorkerObserver):
        def heartbeat(self, held: bool, refused: Refused = "lease_lost") -> None:
            refusals.append(refused)

    lease = Lease(make_job("k", id=7))
    heard(lease, False, Counting(), "cancelled")
    heard(lease, False, Counting(), "cancelled")
    assert lease.lost.is_set()
    assert refusals == ["cancelled"]
    assert caplog.text.count("lost its lease") == 1
