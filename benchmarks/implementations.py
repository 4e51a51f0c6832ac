"""What a worker process of each implementation does: connect, wait at the barrier
with the others, then drain the queue of no-op jobs, reporting which jobs it ran.

Everything here runs in a spawned process, so each worker's peak RSS is its own.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

QUEUECORE = "queuecore"
#: queuecore completing with `complete_many` over an ack window: shown on its own rows.
QUEUECORE_BATCHED = "queuecore complete_many"
ACK_WINDOW_JOBS = 100
ACK_WINDOW_S = 0.05
#: queuecore's async API (`connect_async`): TASKS concurrent tasks claim and complete.
QUEUECORE_ASYNC = "queuecore async"
TASKS = 8
FLOOR = "floor"
#: SQLite's floor under the amended R08: a one-job claim is one statement (dead written lazily).
FLOOR_ONE_STATEMENT = "floor, one statement"
HUEY = "huey"
PGQUEUER = "pgqueuer"


@dataclass(frozen=True)
class Target:
    """One database to drain: a SQLite file (with its synchronous mode) or a
    PostgreSQL database (a SQLAlchemy URL)."""

    backend: str
    location: str
    synchronous: str = "NORMAL"

    @property
    def url(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self.location}"
        return self.location

    @property
    def libpq_dsn(self) -> str:
        """The URL as the bare drivers take it (no SQLAlchemy driver suffix). Plain string
        work: a floor's worker must not import SQLAlchemy, or its RSS would show it.
        queuecore's own `prepare_threshold` (R34, behind a pooler) is not libpq's: it is
        left out, and a bare driver prepares nothing unless asked."""
        rest = self.location.split("://", 1)[1]
        base, _, query = rest.partition("?")
        kept = [
            part for part in query.split("&") if part and not part.startswith("prepare_threshold=")
        ]
        return "postgresql://" + base + ("?" + "&".join(kept) if kept else "")


#: (ids of the jobs this worker ran, start, end) with start taken as the barrier opens.
Drained = tuple[list[int], float, float]


def _connect_queuecore(target: Target) -> Any:
    """queuecore on the target, on the same stdlib sqlite3 as the floor and huey (its
    warning about this machine's SQLite build is in the README, not in every worker)."""
    import warnings

    import queuecore

    warnings.simplefilter("ignore", queuecore.SQLiteBuildWarning)
    options = {"synchronous": target.synchronous} if target.backend == "sqlite" else {}
    return queuecore.connect(target.url, **options)


def _queuecore(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    """One claim, then each job's complete: each its own transaction."""
    with _connect_queuecore(target) as queue:
        queue.stats()  # the pool's connection is open before the clock starts
        barrier.wait()
        start = time.perf_counter()
        ran: list[int] = []
        while jobs := queue.claim(name, limit=limit):
            for job in jobs:
                if not queue.complete(job):
                    raise RuntimeError(f"a fenced complete failed in {name}")
                ran.append(job.id)
        return ran, start, time.perf_counter()


def connect_queuecore_async(target: Target) -> Any:
    """`_connect_queuecore`'s options, through `connect_async` (a coroutine)."""
    import warnings

    import queuecore

    warnings.simplefilter("ignore", queuecore.SQLiteBuildWarning)
    options = {"synchronous": target.synchronous} if target.backend == "sqlite" else {}
    return queuecore.connect_async(target.url, **options)


def _queuecore_async(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    """TASKS tasks on one event loop, each claiming and completing as `_queuecore` does."""
    import asyncio

    async def drain() -> Drained:
        async with await connect_queuecore_async(target) as queue:
            await queue.stats()
            ran: list[int] = []

            async def task(number: int) -> None:
                while jobs := await queue.claim(f"{name}-{number}", limit=limit):
                    for job in jobs:
                        if not await queue.complete(job):
                            raise RuntimeError(f"a fenced complete failed in {name}")
                        ran.append(job.id)

            barrier.wait()
            start = time.perf_counter()
            await asyncio.gather(*(task(n) for n in range(TASKS)))
            return ran, start, time.perf_counter()

    return asyncio.run(drain())


def _queuecore_ack_window(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    """Completions held in an ack window and flushed with one `complete_many` after
    ACK_WINDOW_JOBS jobs or ACK_WINDOW_S seconds (and before the worker stops), as a
    worker may do: a crash can only make the held jobs run again once their leases end."""
    import queuecore

    with _connect_queuecore(target) as queue:
        queue.stats()
        barrier.wait()
        start = time.perf_counter()
        ran: list[int] = []
        held: list[queuecore.Job] = []
        oldest = 0.0

        def flush() -> None:
            if not all(queue.complete_many(held)):
                raise RuntimeError(f"a fenced complete failed in {name}")
            ran.extend(job.id for job in held)
            held.clear()

        while jobs := queue.claim(name, limit=limit):
            if not held:
                oldest = time.perf_counter()
            held.extend(jobs)
            if len(held) >= ACK_WINDOW_JOBS or time.perf_counter() - oldest >= ACK_WINDOW_S:
                flush()
        flush()
        return ran, start, time.perf_counter()


def _floor(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    from benchmarks.floors import PostgresFloor, SQLiteFloor

    floor = (
        SQLiteFloor(target.location, synchronous=target.synchronous)
        if target.backend == "sqlite"
        else PostgresFloor(target.libpq_dsn)
    )
    return _drain_floor(floor, limit, name, barrier)


def _floor_one_statement(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    from benchmarks.floors import SQLiteOneStatementFloor

    floor = SQLiteOneStatementFloor(target.location, synchronous=target.synchronous)
    return _drain_floor(floor, limit, name, barrier)


def _drain_floor(floor: Any, limit: int, name: str, barrier: Barrier) -> Drained:
    barrier.wait()
    start = time.perf_counter()
    ran: list[int] = []
    while jobs := floor.claim(name, limit):
        for job_id, *_, token in jobs:
            if not floor.complete(job_id, token):
                raise RuntimeError(f"a fenced complete failed in {name}")
            ran.append(job_id)
    end = time.perf_counter()
    floor.close()
    return ran, start, end


def huey_app(path: str, synchronous: str) -> tuple[object, Callable[[int], object]]:
    """huey on its SQLite storage with our synchronous mode, and its no-op task."""
    from huey import SqliteHuey

    huey = SqliteHuey(filename=path, results=False)
    huey.storage.conn.execute(f"PRAGMA synchronous = {synchronous}")

    @huey.task(name="noop")
    def noop(n: int) -> None:
        """Does nothing: the benchmark measures the queue, not the work."""

    return huey, noop


def _huey(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    """huey has no batch dequeue: `limit` does not apply. A dequeue deletes the row."""
    huey, _ = huey_app(target.location, target.synchronous)
    barrier.wait()
    start = time.perf_counter()
    ran: list[int] = []
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
        ran.append(task.args[0])
    return ran, start, time.perf_counter()


def _pgqueuer(target: Target, limit: int, name: str, barrier: Barrier) -> Drained:
    """pgqueuer's own worker (QueueManager.run) in drain mode, `limit` as its batch size,
    with a no-op entrypoint; acks are buffered by pgqueuer as in production."""
    import asyncio

    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    async def drain() -> Drained:
        conn = await asyncpg.connect(target.libpq_dsn)
        manager = QueueManager(Queries(AsyncpgDriver(conn)))
        ran: list[int] = []

        @manager.entrypoint("noop")
        async def noop(job: object) -> None:
            ran.append(job.id)  # type: ignore[attr-defined]

        barrier.wait()
        start = time.perf_counter()
        await manager.run(batch_size=limit, mode=QueueExecutionMode.drain)
        end = time.perf_counter()
        await conn.close()
        return ran, start, end

    return asyncio.run(drain())


DRAINERS: dict[str, Callable[[Target, int, str, Barrier], Drained]] = {
    QUEUECORE: _queuecore,
    QUEUECORE_BATCHED: _queuecore_ack_window,
    QUEUECORE_ASYNC: _queuecore_async,
    FLOOR: _floor,
    FLOOR_ONE_STATEMENT: _floor_one_statement,
    HUEY: _huey,
    PGQUEUER: _pgqueuer,
}


def worker(
    implementation: str, target: Target, limit: int, name: str, barrier: Barrier, out: Connection
) -> None:
    """A worker process's entry point: sends (ids, start, end, peak RSS in KiB), or the
    error as text (an exception object may not survive pickling)."""
    try:
        ran, start, end = DRAINERS[implementation](target, limit, name, barrier)
    except BaseException as error:
        barrier.abort()
        out.send(f"{name}: {type(error).__name__}: {error}")
        raise
    out.send((ran, start, end, peak_rss_kib()))


def peak_rss_kib() -> int:
    """This process's peak resident memory. Linux keeps `ru_maxrss` across exec, so a
    spawned worker would report its parent's peak; VmHWM starts afresh with the program."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
