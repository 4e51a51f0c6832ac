"""The worker's automatic prefetch and how far ahead a handler process is kept: how many
jobs follow from the handlers' mean run time, and what a long handler gives back."""

from __future__ import annotations

from queuecore.worker.claimer import AUTO_PREFETCH_MOST, auto_prefetch
from queuecore.worker.holdings import Holdings
from queuecore.worker.processes.slot_rules import AHEAD_MOST, jobs_ahead
from tests.worker.processes import queuecore_process, wait_until


def test_before_any_handler_ran_each_slot_gets_one_job_ahead():
    assert auto_prefetch(1, None) == 1
    assert auto_prefetch(4, None) == 4
    assert jobs_ahead(None) == 1


def test_long_handlers_claim_nothing_ahead_and_short_ones_about_50_ms_of_work():
    assert auto_prefetch(1, 2.0) == 0  # no job waits under a lease for a slot
    assert auto_prefetch(4, 0.01) == 20
    assert auto_prefetch(1, 1e-5) == AUTO_PREFETCH_MOST
    assert auto_prefetch(1, 0.0) == AUTO_PREFETCH_MOST


def test_a_handler_process_holds_one_job_ahead_of_long_handlers_a_few_of_short_ones():
    assert jobs_ahead(0.5) == 1
    assert jobs_ahead(0.004) == 2
    assert jobs_ahead(1e-5) == AHEAD_MOST


def test_the_mean_follows_recent_runs():
    holdings = Holdings()
    holdings.ran(1.0)
    assert holdings.handler_seconds == 1.0
    for _ in range(100):
        holdings.ran(0.001)
    assert holdings.handler_seconds is not None and holdings.handler_seconds < 0.01


def test_jobs_taken_ahead_of_a_long_handler_go_to_a_free_slot(make_queue, dsn, tmp_path):
    """A handler process takes jobs ahead of the one it runs; when that one turns out long,
    they go back to the other slots: no quick job waits behind a slow one while a slot
    is free (the quick ones are all done while the slow one still runs)."""
    queue = make_queue(clock=None)
    for _ in range(20):  # the mean handler time the worker learns first: short
        queue.enqueue("quick", {})
    slow = queue.enqueue("slow", {"started": str(tmp_path / "started"), "seconds": 30}).id
    behind = [queue.enqueue("quick", {}).id for _ in range(6)]
    log = tmp_path / "worker.log"
    command = ("worker", "tests.worker.handlers:REGISTRY", "--concurrency", "2", "--dsn", dsn)
    with queuecore_process(*command, log=log) as worker:
        wait_until(
            lambda: all(queue.get(i).state == "done" for i in behind), worker, log, timeout=20
        )
        assert queue.get(slow).state == "running"
