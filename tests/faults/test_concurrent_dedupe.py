"""R02 under a race: processes enqueueing one dedupe_key at the same instant make one
job, and every one of them is told its id."""

from __future__ import annotations

from tests.faults.actors import enqueue_same_key, run_all
from tests.faults.helpers import scalar

PROCESSES = 5


def test_same_dedupe_key_from_several_processes_at_once(backend, private_dsn):
    results = run_all(enqueue_same_key, [(private_dsn, "only-once")] * PROCESSES)
    failures = [r for r in results if isinstance(r, str)]
    assert not failures, failures[0]
    ids = {job_id for job_id, _ in results}
    assert len(ids) == 1
    assert sorted(created for _, created in results) == [False] * (PROCESSES - 1) + [True]
    assert scalar(private_dsn, "SELECT count(*) FROM queuecore_jobs") == 1
    assert scalar(private_dsn, "SELECT id FROM queuecore_jobs") in ids
