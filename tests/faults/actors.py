"""What the other processes of a fault test do. Each runs in a fresh interpreter (the
multiprocessing "spawn" start method, or `python -m tests.faults.actors`), so a kill
or a skewed clock affects it alone."""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

LEDGER = sa.table("ledger", sa.column("job_id"), sa.column("note"))


def create_ledger(dsn: str) -> None:
    """The table a job's effect writes to: one row per effect that landed."""
    engine = sa.create_engine(dsn)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE ledger (job_id BIGINT NOT NULL, note TEXT NOT NULL)")
    engine.dispose()


def write_ledger(job_id: int, note: str) -> Callable[[sa.Connection], None]:
    def effect(conn: sa.Connection) -> None:
        conn.execute(sa.insert(LEDGER).values(job_id=job_id, note=note))

    return effect


def run_all(target: Callable[..., Any], args_per_process: list[tuple[Any, ...]]) -> list[Any]:
    """Runs `target(barrier, *args)` in one process per args, all released at the same
    instant by the barrier; returns what each returned, in order. An exception in a
    process comes back as a string, so the test can show it."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args_per_process))
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_report, args=(results, index, target, barrier, *args))
        for index, args in enumerate(args_per_process)
    ]
    for process in processes:
        process.start()
    collected = dict(results.get(timeout=300) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    return [collected[index] for index in range(len(processes))]


def _report(results: Any, index: int, target: Callable[..., Any], *args: Any) -> None:
    warnings.simplefilter("ignore")  # the SQLite build warning, once per process
    try:
        results.put((index, target(*args)))
    except BaseException:
        results.put((index, "FAILED: " + traceback.format_exc()))


# --- targets for run_all ------------------------------------------------------------


def enqueue_same_key(barrier: Any, dsn: str, key: str) -> tuple[int, bool]:
    import queuecore

    with queuecore.connect(dsn) as queue:
        barrier.wait()
        res = queue.enqueue("dedupe", {"key": key}, dedupe_key=key)
    return res.id, res.created


def produce_and_consume(barrier: Any, dsn: str, name: str, jobs: int) -> dict[str, Any]:
    """Connect (a fresh file is migrated by whoever gets there first), then enqueue and
    claim in turns, then drain. Returns the ids this process enqueued and completed."""
    import queuecore

    barrier.wait()
    enqueued: list[int] = []
    completed: list[int] = []
    with queuecore.connect(dsn, busy_timeout=10) as queue:
        for n in range(jobs):
            enqueued.append(queue.enqueue("work", {"by": name, "n": n}).id)
            completed += [job.id for job in queue.claim(name, limit=2) if queue.complete(job)]
        while claimed := queue.claim(name, limit=5):
            completed += [job.id for job in claimed if queue.complete(job)]
    return {"enqueued": enqueued, "completed": completed}


# --- commands for `python -m tests.faults.actors` -------------------------------------


def complete_and_hang(dsn: str, now: float) -> None:
    """Claim one job and complete it with an effect that writes the ledger and then
    waits forever inside the completing transaction, for the test to kill -9."""
    import queuecore

    def effect(conn: sa.Connection) -> None:
        write_ledger(job.id, "first claim")(conn)
        print(json.dumps({"inside": job.id}), flush=True)
        sys.stdin.read()  # the test closes nothing: it kills

    queue = queuecore.connect(dsn, clock=lambda: now)
    (job,) = queue.claim("doomed")
    queue.complete(job, effect=effect)
    raise AssertionError("the test should have killed this process")


def skewed(skew: float, dsn: str, action: str, lease_seconds: float) -> None:
    """Act with a local clock `skew` seconds off. No clock is passed, so on PostgreSQL
    the server's clock is the queue's; anything that used the local one would show."""
    real_time = time.time
    time.time = lambda: real_time() + skew
    import queuecore

    queue = queuecore.connect(dsn, lease_seconds=lease_seconds)
    if action == "enqueue":
        out: Any = queue.enqueue("skew", {}).id
    elif action == "claim":
        out = [
            {"id": job.id, "lease_expires_at": job.lease_expires_at.timestamp()}
            for job in queue.claim(f"skewed{skew:+g}")
        ]
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(out), flush=True)
    queue.close()


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    command, *arguments = sys.argv[1:]
    if command == "complete-and-hang":
        complete_and_hang(arguments[0], float(arguments[1]))
    elif command == "skewed":
        skewed(float(arguments[0]), arguments[1], arguments[2], float(arguments[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")
