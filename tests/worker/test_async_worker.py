"""`queuecore.AsyncWorker` in-process, on both backends: `async def` handlers as tasks of
one event loop under W1-W4 (the fake clock where time matters), its ack window, results,
and a registry that mixes sync and async handlers. Its worker-process twin, with real
signals and crashes (W4, W7), is tests/worker/test_async_worker_processes.py.

Each test runs one `asyncio.run`: the worker is a task on that loop, driven through an
`AsyncQueue` (`queuecore.connect_async`), and the test reads the rows through the
fixtures' sync queue, on a thread, so the loop never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest

import queuecore
from queuecore import AsyncWorker, Done, Permanent, Retry, current_lease
from queuecore.observe.observer import WorkerObserver
from tests.faults.helpers import PATIENCE
from tests.worker.test_worker import effect_rows, write_effect

__all__ = ["effect_rows"]  # a fixture of these tests

FOREVER = 3600.0  # an ack wait that never runs out during a test: only N or a stop flush


Opener = Callable[[], queuecore.AsyncQueue]


@pytest.fixture
def opener(dsn: str, clock: Any) -> Opener:
    """Opens an `AsyncQueue` on the test's database, on the fake clock and rng = 1.0."""
    return lambda: queuecore.connect_async(dsn, clock=clock, rng=lambda: 1.0)


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait (without blocking the loop) until `condition`, read on a thread, holds."""
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not await asyncio.to_thread(condition):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up after {PATIENCE}s waiting until {what}")
        await asyncio.sleep(0.02)


def drain(opener: Opener, handlers: Any, **options: Any) -> None:
    """Run an async worker until nothing is ready (the fake clock never readies a retry)."""
    options.setdefault("poll_interval", 0.05)

    async def scenario() -> None:
        async with opener() as aqueue:
            await asyncio.wait_for(
                AsyncWorker(aqueue, handlers, exit_when_idle=0, **options).run(), PATIENCE
            )

    asyncio.run(scenario())


def alongside(
    opener: Opener,
    handlers: Any,
    body: Callable[[AsyncWorker], Coroutine[Any, Any, None]],
    **options: Any,
) -> None:
    """Run `body` while an async worker runs, then stop the worker (W4) and wait for it."""
    options.setdefault("poll_interval", 0.05)

    async def scenario() -> None:
        async with opener() as aqueue:
            worker = AsyncWorker(aqueue, handlers, **options)
            running = asyncio.create_task(worker.run(handle_signals=False))
            try:
                await body(worker)
            finally:
                await asyncio.sleep(0)  # run() has begun, so stop() finds it running
                worker.stop()
                await asyncio.wait_for(running, PATIENCE)

    asyncio.run(scenario())


def test_w1_async_handlers_run_and_an_exception_never_stops_the_worker(queue, opener):
    async def fine(job: queuecore.Job) -> None:
        await asyncio.sleep(0)

    async def boom(job: queuecore.Job) -> None:
        raise ValueError("the payload was not what we hoped")

    ids = [queue.enqueue(kind, {}, priority=-i).id for i, kind in enumerate(["fine", "boom"] * 2)]
    drain(opener, {"fine": fine, "boom": boom})
    snaps = [queue.get(i) for i in ids]
    assert [(s.state, s.attempts) for s in snaps] == [("done", 1), ("queued", 1)] * 2
    assert snaps[1].last_error.startswith("ValueError: the payload was not what we hoped")


@pytest.mark.parametrize("ack_batch", [1, 100], ids=["one-by-one", "ack-window"])
def test_results_effects_permanent_and_retry_as_a_sync_handler_has_them(
    queue, opener, clock, effect_rows, ack_batch
):
    async def answer(job: queuecore.Job) -> object:
        what = job.payload["what"]
        if what == "result":
            return {"total": 6}
        if what == "done":
            return Done(result=["ok"], effect=write_effect(job))
        if what == "effect":
            return write_effect(job)
        if what == "permanent":
            raise Permanent("no such account")
        if what == "retry":
            raise Retry(7)
        return {"a set": {1, 2}}  # not JSON: fails its own job only

    whats = ["result", "done", "effect", "permanent", "retry", "not-json"]
    ids = {what: queue.enqueue("answer", {"what": what}).id for what in whats}
    drain(opener, {"answer": answer}, ack_batch=ack_batch, ack_seconds=0.5)
    snaps = {what: queue.get(job_id) for what, job_id in ids.items()}
    assert (snaps["result"].state, snaps["result"].result) == ("done", {"total": 6})
    assert (snaps["done"].state, snaps["done"].result) == ("done", ["ok"])
    assert (snaps["effect"].state, snaps["effect"].result) == ("done", None)
    assert effect_rows() == sorted([ids["done"], ids["effect"]])
    assert (snaps["permanent"].state, snaps["permanent"].attempts) == ("dead", 1)
    assert snaps["permanent"].last_error.startswith("Permanent: no such account")
    assert snaps["retry"].state == "queued"
    assert snaps["retry"].visible_at.timestamp() == clock.now + 7  # Retry's, not the backoff's
    assert snaps["not-json"].state == "queued"
    assert snaps["not-json"].last_error.startswith("TypeError: result is not JSON")


def test_w2_a_kind_without_a_handler_is_never_claimed(queue, opener):
    unknown = queue.enqueue("invoice.send", {}, priority=-1).id
    known = queue.enqueue("other", {}).id

    async def other(job: queuecore.Job) -> None:
        return None

    drain(opener, {"other": other})
    snap = queue.get(unknown)
    assert (snap.state, snap.attempts, snap.last_error, snap.worker) == ("queued", 0, None, None)
    assert queue.get(known).state == "done"


def test_concurrency_is_the_number_of_tasks_on_the_loop(queue, opener):
    """Six jobs, three tasks: three handlers run at once (each waits, on the loop, until
    three have begun), and never more."""
    running, most = 0, 0

    async def three_at_once() -> None:
        while most < 3:
            await asyncio.sleep(0.01)

    async def meet(job: queuecore.Job) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.wait_for(three_at_once(), 10)
            await asyncio.sleep(0.05)
        finally:
            running -= 1

    ids = [queue.enqueue("meet", {}).id for _ in range(6)]
    drain(opener, {"meet": meet}, concurrency=3)
    assert [(queue.get(i).state, queue.get(i).attempts) for i in ids] == [("done", 1)] * 6
    assert most == 3


def test_a_mixed_registry_runs_sync_handlers_on_threads_beside_the_loop(queue, opener):
    """A sync handler blocks its thread until an async handler, on the loop, lets it go:
    run on the loop's thread instead, it would block the loop and wait in vain."""
    go = threading.Event()
    loop_thread: list[int] = []

    def blocking(job: queuecore.Job) -> dict[str, bool]:
        return {
            "released": go.wait(10),
            "on_the_loop": threading.get_ident() in loop_thread,
            "lease": current_lease().job.id == job.id,
        }

    async def release(job: queuecore.Job) -> None:
        loop_thread.append(threading.get_ident())
        await asyncio.sleep(0.1)
        go.set()

    blocked = queue.enqueue("blocking", {}).id  # runs first (lower priority runs first)
    releasing = queue.enqueue("release", {}, priority=1).id
    drain(opener, {"blocking": blocking, "release": release}, concurrency=2)
    assert queue.get(releasing).state == "done"
    snap = queue.get(blocked)
    assert (snap.state, snap.result) == (
        "done",
        {"released": True, "on_the_loop": False, "lease": True},
    )


def test_w3_heartbeats_keep_the_lease_of_a_long_handler(queue, opener, clock):
    finish = asyncio.Event()
    started: list[int] = []

    async def long(job: queuecore.Job) -> None:
        started.append(job.id)
        await finish.wait()

    job_id = queue.enqueue("long", {}).id

    async def body(worker: AsyncWorker) -> None:
        await until(lambda: started, "the handler to start")
        for _ in range(3):  # 3 x 0.8 leases: far past one lease
            clock.advance(queue.lease_seconds * 0.8)
            await until(
                lambda: queue.get(job_id).visible_at.timestamp() == clock.now + queue.lease_seconds,
                "a heartbeat",
            )
        assert await asyncio.to_thread(queue.claim, "someone-else") == []
        finish.set()
        await until(lambda: queue.get(job_id).state == "done", "the job to finish")

    alongside(opener, {"long": long}, body, heartbeat_seconds=0.05)
    assert queue.get(job_id).attempts == 1


def test_w3_a_cancelled_jobs_handler_sees_its_lease_lost(queue, opener, effect_rows):
    seen: list[tuple[bool, bool]] = []
    began = threading.Event()

    async def patient(job: queuecore.Job) -> object:
        lease = current_lease()
        assert isinstance(lease, queuecore.AsyncLease)
        began.set()
        try:
            await asyncio.wait_for(lease.lost_async.wait(), PATIENCE)
        finally:
            seen.append((lease.lost_async.is_set(), lease.lost.is_set()))
        return write_effect(job)

    job_id = queue.enqueue("patient", {}).id

    async def body(worker: AsyncWorker) -> None:
        # Not the row's "running": a job cancelled between its claim and its start is
        # let go unstarted (W9), and its handler would never see a lease to lose.
        await until(began.is_set, "the handler begins")
        assert await asyncio.to_thread(queue.cancel, job_id)
        await until(lambda: seen, "the handler to notice")

    alongside(opener, {"patient": patient}, body, heartbeat_seconds=0.05)
    assert seen == [(True, True)]
    assert queue.get(job_id).state == "cancelled"
    assert effect_rows() == []  # the late completion was refused, effect and all


def test_w4_stop_finishes_running_handlers_and_releases_unstarted_jobs(queue, opener):
    finish = asyncio.Event()
    started: list[int] = []

    async def first(job: queuecore.Job) -> None:
        started.append(job.id)
        await finish.wait()

    async def later(job: queuecore.Job) -> None:
        return None

    running = queue.enqueue("first", {}, priority=0).id
    waiting = [queue.enqueue("later", {}, priority=1).id for _ in range(2)]

    async def body(worker: AsyncWorker) -> None:
        await until(lambda: started, "the handler to start")
        assert (
            await asyncio.to_thread(lambda: [queue.get(i).state for i in waiting])
            == ["running"] * 2
        )  # claimed ahead
        worker.stop()
        await asyncio.sleep(0.2)
        finish.set()  # the running handler finishes after the stop

    alongside(opener, {"first": first, "later": later}, body, prefetch=2)
    assert queue.get(running).state == "done"
    assert [(queue.get(i).state, queue.get(i).attempts) for i in waiting] == [("queued", 0)] * 2


def test_the_ack_window_flushes_at_n_and_a_stop_flushes_the_rest(queue, opener):
    ran: list[int] = []

    async def note(job: queuecore.Job) -> None:
        ran.append(job.id)

    ids = [queue.enqueue("note", {}, priority=i).id for i in range(4)]

    async def body(worker: AsyncWorker) -> None:
        states: Callable[[], Awaitable[list[str]]] = lambda: asyncio.to_thread(  # noqa: E731
            lambda: [queue.get(i).state for i in ids]
        )
        await until(lambda: [queue.get(i).state for i in ids[:3]] == ["done"] * 3, "N = 3")
        await until(lambda: ids[3] in ran, "the fourth handler")
        assert (await states())[3] == "running"  # alone in the window, its lease held

    alongside(opener, {"note": note}, body, ack_batch=3, ack_seconds=FOREVER)
    assert [queue.get(i).state for i in ids] == ["done"] * 4  # the stop flushed it


def test_an_async_worker_refuses_what_a_worker_refuses(opener):
    async def refused() -> None:
        async with opener() as aqueue:
            with pytest.raises(ValueError, match="at least one kind"):
                AsyncWorker(aqueue, {})
            with pytest.raises(ValueError, match="concurrency"):
                AsyncWorker(aqueue, {"a": lambda job: None}, concurrency=0)
            with pytest.raises(ValueError, match="name is 256 characters long"):
                AsyncWorker(aqueue, {"a": lambda job: None}, name="w" * 256, heartbeat_seconds=1)

    asyncio.run(refused())


def test_a_sync_worker_without_handler_processes_refuses_async_handlers(queue):
    async def handler(job: queuecore.Job) -> None:
        return None

    with pytest.raises(TypeError, match="AsyncWorker"):
        queuecore.Worker(queue, {"a": handler})


def test_a_handler_that_returns_an_awaitable_fails_its_job_saying_why(queue, opener):
    """A sync decorator around an `async def` handler hides it: its coroutine would be
    taken for a result; the job fails with an error that says what to do instead."""

    async def real(job: queuecore.Job) -> None:
        return None

    def decorated(job: queuecore.Job) -> object:
        return real(job)

    job_id = queue.enqueue("hidden", {}).id
    drain(opener, {"hidden": decorated})
    snap = queue.get(job_id)
    assert snap.state == "queued"
    assert snap.last_error.startswith("TypeError: the handler returned an awaitable"), snap


class Broken(WorkerObserver):
    """An observer with a bug: the worker must not go on with a task short."""

    def handler_started(self, job: queuecore.Job) -> None:
        raise RuntimeError("a bug in the metrics")


def test_a_task_that_fails_stops_the_worker_which_raises_it(queue, opener):
    async def fine(job: queuecore.Job) -> None:
        return None

    queue.enqueue("fine", {})

    async def scenario() -> None:
        async with opener() as aqueue:
            worker = AsyncWorker(aqueue, {"fine": fine}, observer=Broken(), poll_interval=0.05)
            await asyncio.wait_for(worker.run(handle_signals=False), PATIENCE)

    with pytest.raises(RuntimeError, match="a bug in the metrics"):
        asyncio.run(scenario())


class AsyncCallable:
    """An object whose `__call__` is `async def`: an async handler too."""

    async def __call__(self, job: queuecore.Job) -> str:
        return "object"


def test_partials_and_objects_with_async_call_are_async_handlers(queue, opener):
    async def greet(greeting: str, job: queuecore.Job) -> str:
        return greeting

    handlers = {"partial": functools.partial(greet, "hello"), "object": AsyncCallable()}
    ids = {kind: queue.enqueue(kind, {}).id for kind in handlers}
    drain(opener, handlers)
    assert {k: (queue.get(i).state, queue.get(i).result) for k, i in ids.items()} == {
        "partial": ("done", "hello"),
        "object": ("done", "object"),
    }


def test_a_registrys_periodic_schedules_enqueue_through_the_loop(opener):
    """The schedules' thread enqueues through the worker's loop and `AsyncQueue`; the
    worker then runs the tick (the fake clock's latest second)."""
    jobs = queuecore.Registry()
    ran: list[str] = []

    @jobs.periodic("* * * * * *", "tick", {"source": "every second"})
    async def tick(job: queuecore.Job) -> None:
        ran.append(job.payload["source"])

    async def body(worker: AsyncWorker) -> None:
        await until(lambda: ran, "a tick to run")

    alongside(opener, jobs, body)
    assert ran[0] == "every second"


def test_r33_an_async_worker_appears_in_workers_and_disappears_at_its_stop(queue, opener):
    async def body(worker: AsyncWorker) -> None:
        await until(lambda: [w.name for w in queue.workers()] == ["aw-r33"], "it registered")
        [me] = await asyncio.to_thread(queue.workers)
        assert (me.queues, me.kinds, me.concurrency) == (None, ["k"], 3)

    alongside(opener, {"k": lambda job: None}, body, name="aw-r33", concurrency=3)
    assert queue.workers() == []


@pytest.mark.parametrize("ack_batch", [1, 100], ids=["one-by-one", "ack-window"])
def test_w1_a_completion_the_server_keeps_rolling_back_is_made_again_not_failed(
    queue, opener, effect_rows, ack_batch
):
    """The async twin of the sync worker's test: a completion the database rolled back on
    every one of the queue's own tries (a `DeadlockError`) waits and is made again; the
    job is done on its first attempt, its effect written once."""
    job_id = queue.enqueue("write", {}).id
    refusals = {"complete": 2, "complete_many": 2}

    @contextlib.asynccontextmanager
    async def refusing() -> AsyncIterator[queuecore.AsyncQueue]:
        async with opener() as aqueue:
            for name in refusals:
                real = getattr(aqueue, name)

                async def refuse_then_report(*args: Any, _name=name, _real=real, **kwargs: Any):
                    if refusals[_name]:
                        refusals[_name] -= 1
                        raise queuecore.DeadlockError(f"{_name}: rolled back on each of 6 tries")
                    return await _real(*args, **kwargs)

                setattr(aqueue, name, refuse_then_report)
            yield aqueue

    async def write(job: queuecore.Job) -> object:
        return write_effect(job)

    drain(refusing, {"write": write}, ack_batch=ack_batch, ack_seconds=0.05)
    snap = queue.get(job_id)
    assert (snap.state, snap.attempts, snap.last_error) == ("done", 1, None)
    assert effect_rows() == [job_id]
    assert min(refusals.values()) == 0  # the path the report took was refused twice
