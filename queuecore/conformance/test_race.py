"""R04: real processes racing over one queue never get the same job."""

from __future__ import annotations

import multiprocessing
from collections import Counter

from queuecore.conformance.helpers import count_jobs
from queuecore.conformance.race_worker import drain

PROCESSES = 4
JOBS = 2000


def test_r04_racing_processes_never_share_a_job(queue, dsn, db):
    enqueued = queue.enqueue_many("k", [{"n": i} for i in range(JOBS)])
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(PROCESSES), spawn.Queue()
    racers = [
        spawn.Process(target=drain, args=(dsn, f"racer-{i}", 1 + i % 2, start, results))
        for i in range(PROCESSES)
    ]
    for racer in racers:
        racer.start()
    reports = [results.get(timeout=60) for _ in racers]  # drained before join
    for racer in racers:
        racer.join(timeout=30)
    assert [error for _name, _seen, error in reports] == [None] * PROCESSES
    assert [racer.exitcode for racer in racers] == [0] * PROCESSES

    claims = [claim for _name, seen, _error in reports for claim in seen]
    claimed_ids = Counter(job_id for job_id, _token, _completed in claims)
    assert sorted(claimed_ids) == sorted(enqueued)
    assert set(claimed_ids.values()) == {1}  # no job handed out twice
    tokens = {(job_id, token) for job_id, token, _completed in claims}
    assert len(tokens) == JOBS
    assert all(completed for _id, _token, completed in claims)
    assert count_jobs(db, "done") == JOBS
    assert sum(1 for _name, seen, _error in reports if seen) >= 2  # they really raced
