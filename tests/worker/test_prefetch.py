"""The worker's automatic prefetch and how far ahead a handler process is kept: how many
jobs follow from the handlers' mean run time, and what a long handler gives back."""

from __future__ import annotations

from queuecore.job import Job, to_datetime
from queuecore.worker.claimer import AUTO_PREFETCH_MOST, auto_prefetch
from queuecore.worker.holdings import WARM_UP_RUNS, Holdings
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


def test_one_quick_first_run_does_not_set_the_mean():
    """A job that fails at once, first, would have the worker claim its most ahead."""
    holdings = Holdings()
    holdings.ran(0.0)
    assert holdings.handler_seconds is None  # each slot keeps one job ahead until known
    for _ in range(WARM_UP_RUNS - 1):
        holdings.ran(0.02)
    mean = holdings.handler_seconds
    assert mean is not None and abs(mean - 0.02 * (WARM_UP_RUNS - 1) / WARM_UP_RUNS) < 1e-9
    assert auto_prefetch(1, mean) < AUTO_PREFETCH_MOST


def test_the_mean_follows_recent_runs():
    holdings = Holdings()
    for _ in range(WARM_UP_RUNS):
        holdings.ran(1.0)
    assert holdings.handler_seconds == 1.0
    for _ in range(100):
        holdings.ran(0.001)
    assert holdings.handler_seconds is not None and holdings.handler_seconds < 0.01


def _job(number: int) -> Job:
    expires = to_datetime(1_800_000_000.123456)
    return Job(number, "noop", {}, "default", 0, 1, 3, "token", expires)


def test_a_job_let_go_wakes_the_claimer_only_once_there_is_room_for_its_claim():
    """The claimer waits for room for half its prefetch while jobs wait for a slot: each
    job let go before then leaves it asleep (each wake had cost it a look at every
    lease, once per job); the one that makes the room wakes it."""
    holdings = Holdings()
    holdings.hand_out([_job(n) for n in range(1, 11)])  # 10 held, all waiting
    running = holdings.take(6, wait=False)  # 6 run, 4 still wait
    assert running is not None and len(running) == 6
    holdings.wake.clear()
    holdings.wake_for_room(active_limit=10, held_limit=20, at_least=3)
    holdings.let_go(running[0])
    holdings.let_go(running[1])
    assert not holdings.wake.is_set()  # room for 2: not yet
    holdings.let_go(running[2])
    assert holdings.wake.is_set()  # room for 3


def test_the_claimer_wakes_for_one_job_of_room_once_no_claimed_job_waits():
    """With nothing waiting for a slot, a slot about to be idle needs a claim now."""
    holdings = Holdings()
    holdings.hand_out([_job(n) for n in range(1, 5)])
    taken = holdings.take(4, wait=False)
    assert taken is not None and len(taken) == 4
    holdings.wake.clear()
    holdings.wake_for_room(active_limit=4, held_limit=8, at_least=2)
    assert not holdings.wake.is_set()
    holdings.let_go(taken[0])
    assert holdings.wake.is_set()


def test_waiting_for_work_any_job_let_go_wakes_the_claimer():
    holdings = Holdings()
    holdings.hand_out([_job(1)])
    taken = holdings.take(1, wait=False)
    assert taken
    holdings.wake_for_room(active_limit=1, held_limit=1, at_least=100)
    holdings.wake_for_any()
    holdings.wake.clear()
    holdings.let_go(taken[0])
    assert holdings.wake.is_set()


def test_a_slot_waiting_on_its_child_is_rung_once_when_a_job_waits_or_the_worker_stops():
    """The event-loop process's slot waits on its child's socket while a task there is
    free: the next job claimed (or given back, or a stop) rings it once, so that job
    goes at once instead of after the slot's next look."""
    holdings = Holdings()
    rings: list[str] = []
    assert holdings.ring_when_waiting(lambda: rings.append("claimed"))
    holdings.hand_out([_job(1)])
    holdings.hand_out([_job(2)])
    assert rings == ["claimed"]  # once: the slot asks again before its next wait
    assert not holdings.ring_when_waiting(rings.append)  # jobs wait: look now instead
    taken = holdings.take(2, wait=False)
    assert taken is not None and len(taken) == 2
    assert holdings.ring_when_waiting(lambda: rings.append("given back"))
    assert holdings.hand_back(taken[1:])
    assert rings == ["claimed", "given back"]
    assert holdings.take(1, wait=False)
    assert holdings.ring_when_waiting(lambda: rings.append("stopping"))
    holdings.stop()
    assert rings == ["claimed", "given back", "stopping"]
    assert not holdings.ring_when_waiting(rings.append)


def test_a_slot_that_stopped_ringing_is_not_rung_after_it_closed_its_bell():
    """A slot that ends (a report failed and set `stopping` alone, say) closes the pipe
    it was rung through: a ring left armed must not write to that file descriptor,
    which the process may have given to another file by then."""
    holdings = Holdings()
    rings: list[str] = []
    assert holdings.ring_when_waiting(lambda: rings.append("claimed"))
    holdings.stop_ringing()
    holdings.hand_out([_job(1)])
    holdings.stop()
    assert rings == []


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
