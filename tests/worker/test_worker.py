"""The worker in-process, on both backends, with the fake clock where time matters."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore import Permanent, Registry, Retry, Worker, current_lease
from tests.faults.helpers import wait_until

effects = sa.Table(
    "test_worker_effects", sa.MetaData(), sa.Column("job_id", sa.BigInteger, nullable=False)
)


@pytest.fixture
def effect_rows(queue: Any) -> Iterator[Callable[[], list[int]]]:
    """A table handlers write to through their effect; returns a reader of its job ids."""
    effects.drop(queue.engine, checkfirst=True)
    effects.create(queue.engine)

    def read() -> list[int]:
        with queue.engine.connect() as conn:
            return sorted(conn.execute(sa.select(effects.c.job_id)).scalars())

    yield read
    effects.drop(queue.engine)


def write_effect(job: queuecore.Job) -> Callable[[sa.Connection], None]:
    def effect(conn: sa.Connection) -> None:
        conn.execute(effects.insert().values(job_id=job.id))

    return effect


def drain(queue: Any, handlers: Any, **options: Any) -> None:
    """Run a worker until nothing is ready (the fake clock never makes retries ready)."""
    options.setdefault("poll_interval", 0.05)
    Worker(queue, handlers, exit_when_idle=0, **options).run()


class Background:
    """A worker on a thread of its own, for tests that act while handlers run."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.join()

    def join(self) -> None:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the worker did not stop"


def test_w1_the_effect_is_committed_with_the_completion(queue, effect_rows):
    job_id = queue.enqueue("write", {}).id
    drain(queue, {"write": write_effect})
    assert queue.get(job_id).state == "done"
    assert effect_rows() == [job_id]


def test_w1_an_exception_fails_the_job_and_the_worker_goes_on(queue, caplog):
    caplog.set_level(logging.INFO, logger="queuecore")
    handlers = Registry()

    @handlers.handler("boom")
    def boom(job):
        raise ValueError("the payload was not what we hoped")

    handlers.add("ok", lambda job: None)
    failing = queue.enqueue("boom", {"password": "hunter2"}).id
    fine = [queue.enqueue("ok", {"password": "hunter2"}).id for _ in range(2)]
    drain(queue, handlers)

    snap = queue.get(failing)
    assert (snap.state, snap.attempts) == ("queued", 1)
    assert snap.last_error.startswith("ValueError: the payload was not what we hoped")
    assert [queue.get(i).state for i in fine] == ["done", "done"]
    outcomes = [r for r in caplog.records if r.getMessage().startswith("job ")]
    assert len(outcomes) == 3  # one line per job outcome
    assert "hunter2" not in caplog.text  # payloads never reach the log


def test_w1_permanent_sends_the_job_straight_to_dead(queue):
    def refuse(job):
        raise Permanent("no such account")

    job_id = queue.enqueue("refuse", {}).id
    drain(queue, {"refuse": refuse})
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts) == ("dead", 1)
    assert snap.last_error.startswith("Permanent: no such account")


def test_w1_retry_sets_the_next_delay(queue, clock):
    def later(job):
        raise Retry(7)

    job_id = queue.enqueue("later", {}).id
    drain(queue, {"later": later})
    snap = queue.get(job_id)
    assert snap.state == "queued"
    # The backoff would give 1 s for a first failure (rng pinned to 1.0): this is Retry's.
    assert snap.visible_at.timestamp() == clock.now + 7


def test_w2_a_kind_without_a_handler_is_never_claimed(queue):
    unknown = queue.enqueue("invoice.send", {}, priority=-1).id
    known = queue.enqueue("other", {}).id
    drain(queue, {"other": lambda job: None})
    snap = queue.get(unknown)
    assert (snap.state, snap.attempts, snap.last_error, snap.worker) == ("queued", 0, None, None)
    assert queue.get(known).state == "done"


def test_w2_a_worker_needs_a_kind_to_claim(queue):
    with pytest.raises(ValueError, match="at least one kind"):
        Worker(queue, {})


def test_r29_a_worker_name_past_the_limits_is_refused_at_once(queue):
    with pytest.raises(ValueError, match=r"name is 256 characters long; .* at most 255"):
        Worker(queue, {"k": lambda job: None}, name="w" * 256)
    with pytest.raises(ValueError, match="name contains the control character U\\+001B"):
        Worker(queue, {"k": lambda job: None}, name="w\x1b[2J")


def test_w1_an_effect_that_raises_rolls_back_and_fails_the_job(queue, effect_rows):
    def half_effect(job):
        def effect(conn):
            write_effect(job)(conn)
            raise RuntimeError("constraint violated")

        return effect

    job_id = queue.enqueue("half", {}).id
    drain(queue, {"half": half_effect})
    snap = queue.get(job_id)
    assert snap.state == "queued"
    assert snap.last_error.startswith("RuntimeError: constraint violated")
    assert effect_rows() == []


@pytest.mark.parametrize("ack_batch", [1, 100], ids=["one-by-one", "ack-window"])
def test_r24_a_returned_json_value_is_the_jobs_result(queue, effect_rows, ack_batch):
    """A dict (Celery's habit), a scalar, or `Done` with an effect too; one bad result in
    a batch fails only its own job."""
    handlers = {
        "dict": lambda job: {"total": job.payload["n"] * 2},
        "scalar": lambda job: 42,
        "both": lambda job: queuecore.Done(result=["ok"], effect=write_effect(job)),
        "effect": write_effect,
        "nothing": lambda job: None,
        "not-json": lambda job: {"a set": {1, 2}},
        "too-big": lambda job: "x" * 200,
    }
    ids = {kind: queue.enqueue(kind, {"n": 3}).id for kind in handlers}
    queue.max_result_bytes = 100

    drain(queue, handlers, ack_batch=ack_batch, ack_seconds=0.5)

    snaps = {kind: queue.get(job_id) for kind, job_id in ids.items()}
    assert {k: (s.state, s.result) for k, s in snaps.items() if s.state == "done"} == {
        "dict": ("done", {"total": 6}),
        "scalar": ("done", 42),
        "both": ("done", ["ok"]),
        "effect": ("done", None),
        "nothing": ("done", None),
    }
    assert effect_rows() == sorted([ids["both"], ids["effect"]])
    assert snaps["not-json"].state == "queued"
    assert snaps["not-json"].last_error.startswith("TypeError: result is not JSON")
    assert snaps["too-big"].state == "queued"
    assert "max_result_bytes=100" in snaps["too-big"].last_error


def test_r25_cancelling_a_running_job_sets_its_lease_lost(make_queue):
    queue = make_queue(clock=None, lease_seconds=0.6)  # heartbeats every 0.2 s
    job_id = queue.enqueue("long", {}).id
    started, outcome = threading.Event(), []

    def long(job):
        started.set()
        outcome.append(current_lease().lost.wait(20))
        return {"discarded": True}

    worker = Background(Worker(queue, {"long": long}, poll_interval=0.05))
    try:
        assert started.wait(20)
        assert queue.cancel(job_id)
        wait_until(lambda: outcome, "the handler saw its lease lost")
    finally:
        worker.stop()
    assert outcome == [True]
    snap = queue.get(job_id)
    assert (snap.state, snap.result) == ("cancelled", None)


def test_concurrency_runs_that_many_jobs_at_once(queue):
    together = threading.Barrier(3, timeout=10)  # breaks unless three handlers meet

    def meet(job):
        together.wait()

    ids = [queue.enqueue("meet", {}).id for _ in range(3)]
    drain(queue, {"meet": meet}, concurrency=3)
    assert [queue.get(i).state for i in ids] == ["done"] * 3


def test_w3_heartbeats_keep_the_lease_of_a_long_handler(make_queue, clock):
    queue = make_queue(lease_seconds=10)
    started, finish = threading.Event(), threading.Event()

    def long(job):
        started.set()
        assert finish.wait(20)

    job_id = queue.enqueue("long", {}).id
    worker = Background(Worker(queue, {"long": long}, heartbeat_seconds=0.05))
    try:
        assert started.wait(10)
        for _ in range(3):  # 24 s in all: far past the 10 s lease
            clock.advance(8)
            wait_until(
                lambda: queue.get(job_id).visible_at.timestamp() == clock.now + 10,
                "a heartbeat",
            )
        assert queue.claim("someone-else") == []
        finish.set()
        wait_until(lambda: queue.get(job_id).state == "done", "the job to finish")
    finally:
        finish.set()
        worker.stop()
    assert queue.get(job_id).attempts == 1


def test_w3_a_handler_can_see_that_its_lease_was_lost(make_queue, clock, effect_rows):
    queue = make_queue(lease_seconds=10)
    started, seen = threading.Event(), []

    def patient(job):
        started.set()
        seen.append(current_lease().lost.wait(20))
        return write_effect(job)

    job_id = queue.enqueue("patient", {}).id
    # No prefetch: with the fake clock moved past the lease, the worker's own claimer
    # could otherwise take the job ahead of the thief, and run it after this handler.
    worker = Background(Worker(queue, {"patient": patient}, heartbeat_seconds=0.2, prefetch=0))
    try:
        assert started.wait(10)
        stolen: list = []
        for _ in range(50):  # the lease runs out; take the job before a heartbeat renews it
            clock.advance(11)
            stolen = queue.claim("thief")
            if stolen:
                break
        assert stolen, "the job could never be taken over"
        wait_until(lambda: seen, "the handler to notice")
    finally:
        worker.stop()
    assert seen == [True]
    snap = queue.get(job_id)
    assert (snap.state, snap.worker, snap.attempts) == ("running", "thief", 2)
    assert effect_rows() == []  # the late completion was refused, effect and all


def test_w4_stop_finishes_running_handlers_and_releases_unstarted_jobs(queue):
    started, finish = threading.Event(), threading.Event()

    def first(job):
        started.set()
        assert finish.wait(20)

    running = queue.enqueue("first", {}, priority=0).id
    waiting = [queue.enqueue("later", {}, priority=1).id for _ in range(2)]
    handlers = {"first": first, "later": lambda job: None}
    worker = Background(Worker(queue, handlers, prefetch=2, poll_interval=0.05))
    try:
        assert started.wait(10)
        assert [queue.get(i).state for i in waiting] == ["running"] * 2  # claimed ahead
        worker.worker.stop()
    finally:
        finish.set()
        worker.join()
    assert queue.get(running).state == "done"
    assert [(queue.get(i).state, queue.get(i).attempts) for i in waiting] == [("queued", 0)] * 2


def test_registry_refuses_a_kind_twice():
    handlers = Registry({"a": lambda job: None})
    with pytest.raises(ValueError, match="already has a handler"):
        handlers.add("a", lambda job: None)
    assert list(handlers) == ["a"]


def test_r33_a_worker_appears_in_workers_while_it_runs_and_disappears_at_its_stop(queue):
    """Its record says where it runs and what it serves; a clean stop removes it."""
    worker = Worker(queue, {"k": lambda job: None}, name="w-r33", queues=["mail"], concurrency=2)
    background = Background(worker)
    try:
        wait_until(lambda: [w.name for w in queue.workers()] == ["w-r33"], "it registered")
        [me] = queue.workers()
        assert (me.queues, me.kinds, me.concurrency, me.gone) == (["mail"], ["k"], 2, False)
        assert (me.pid, me.host) == (os.getpid(), socket.gethostname())
    finally:
        background.stop()
    assert queue.workers() == []


@pytest.mark.parametrize("ack_batch", [1, 100])
def test_w1_a_completion_the_server_keeps_rolling_back_is_made_again_not_failed(
    queue, effect_rows, monkeypatch, ack_batch
):
    """A completion that the database rolled back on every one of the queue's own tries
    (a `DeadlockError`: seen on MariaDB while every worker reconnected after an outage)
    is not the handler's failure: the report waits and is made again, and the job is done
    on its first attempt, its effect written once."""
    job_id = queue.enqueue("write", {}).id
    refusals = {"complete": 2, "complete_many": 2}

    def rolled_back_at_first(name: str) -> None:
        real = getattr(queue, name)

        def refuse_then_report(*args: Any, **kwargs: Any) -> Any:
            if refusals[name]:
                refusals[name] -= 1
                raise queuecore.DeadlockError(f"{name}: rolled back on each of 6 tries")
            return real(*args, **kwargs)

        monkeypatch.setattr(queue, name, refuse_then_report)

    rolled_back_at_first("complete")
    rolled_back_at_first("complete_many")
    drain(queue, {"write": write_effect}, ack_batch=ack_batch)
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None)
    assert effect_rows() == [job_id]
