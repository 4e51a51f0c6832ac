"""The jobs of `queuecore demo` and of the chaos test: one kind for each way a job goes
wrong in production, and what the queue must make of it.

Every handler that succeeds returns the same effect: one row in a ledger table, written
in the transaction that completes the job. A job with two ledger rows would prove an
effect ran twice; the verdict counts them. Run them with:

    queuecore worker queuecore.demo.jobs:REGISTRY --dsn ...
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Column, Connection, Engine, Index, Integer, MetaData, Table, Text

from queuecore.handling import Retry, current_lease
from queuecore.job import Job
from queuecore.protocol import Effect
from queuecore.registry import Registry
from queuecore.worker.processes.shared import supervisor_pid

REGISTRY = Registry()

# No unique key on job_id on purpose: a second row must be countable, not an error.
ledger = Table(
    "queuecore_demo_ledger",
    MetaData(),
    Column("job_id", BigInteger, nullable=False),
    Column("queue", Text, nullable=False),  # with job_id: ids may be reused after a purge
    Column("kind", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("pid", Integer, nullable=False),
    Index("ix_queuecore_demo_ledger_job", "job_id"),
)


@dataclass(frozen=True)
class Kind:
    name: str
    share: float  # of the jobs enqueued
    succeeds: bool  # done with one ledger row; otherwise dead after exactly max_attempts
    max_attempts: int
    what: str
    priority: int = 0
    spread: float = 0.0  # enqueued with a delay of up to this many leases

    def ended_right(self, state: str, attempts: int, ledger_rows: int) -> bool:
        """The verdict on one job of this kind once nothing is left running: one ledger row
        proves its effect landed exactly once; a job that can never succeed is dead after
        exactly its attempts, no more (a lost one) and no fewer (one burnt twice)."""
        if self.succeeds:
            return state == "done" and ledger_rows == 1
        return state == "dead" and attempts == self.max_attempts and ledger_rows == 0


# Kinds that succeed get attempts to spare for the supervisor's random kills; the two that
# never succeed get few, so the demo shows them reaching dead quickly.
KINDS = (
    Kind("ordinary", 0.65, True, 8, "a few milliseconds of work"),
    Kind("flaky", 0.12, True, 8, "fails its first attempt, succeeds on a retry"),
    Kind("slow", 0.05, True, 8, "runs 1.5 leases long; heartbeats keep its lease"),
    # Urgent, and arriving over the run: when its frozen worker's lease runs out it is first
    # in line, so another worker takes it over while the frozen one still holds it.
    Kind("stall", 0.04, True, 8, "freezes its worker past the lease on attempt 1", -1, 4.0),
    Kind("poison", 0.03, False, 3, "kills its handler process (SIGKILL), every attempt"),
    Kind("hopeless", 0.11, False, 3, "always raises"),
)


def record(job: Job) -> Effect:
    def write_ledger_row(conn: Connection) -> None:
        conn.execute(
            ledger.insert().values(
                job_id=job.id,
                queue=job.queue,
                kind=job.kind,
                attempt=job.attempts,
                pid=supervisor_pid() or os.getpid(),  # the worker, not its handler process
            )
        )

    return write_ledger_row


@REGISTRY.handler("ordinary")
def ordinary(job: Job) -> Effect:
    time.sleep(job.payload["work_s"])
    return record(job)


@REGISTRY.handler("flaky")
def flaky(job: Job) -> Effect:
    if job.attempts == 1:
        if job.id % 2:
            raise ConnectionError("upstream hiccup (flaky by design)")
        raise Retry(job.payload["retry_in_s"], "upstream asked to come back later")
    return record(job)


@REGISTRY.handler("slow")
def slow(job: Job) -> Effect:
    # Sleeps on the lease's `lost` event: a handler that learns its job was lost stops early.
    current_lease().lost.wait(job.payload["work_s"])
    return record(job)


@REGISTRY.handler("stall")
def stall(job: Job) -> Effect:
    if job.attempts == 1:
        freeze_this_process(job.payload["freeze_s"])
    # Thawed: another worker has most likely taken the job over, and this completion is
    # refused by the fence, effect and all.
    return record(job)


@REGISTRY.handler("poison")
def poison(job: Job) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@REGISTRY.handler("hopeless")
def hopeless(job: Job) -> None:
    if job.id % 2:
        raise RuntimeError("this job can never succeed (hopeless by design)")
    raise ValueError("invalid input, though not marked Permanent (hopeless by design)")


_one_freeze_at_a_time = threading.Lock()


def freeze_this_process(seconds: float) -> None:
    """Stop the whole worker, heartbeat thread included, as a VM pause or a long
    stop-the-world would: this process, and the worker it runs handlers for when it is a
    handler process (W7); a helper process thaws them after `seconds`.

    One freeze at a time: two overlapping ones could end with both helpers' SIGCONTs
    spent before the second SIGSTOP lands, leaving the process stopped for good."""
    frozen = [pid for pid in (supervisor_pid(), os.getpid()) if pid is not None]
    thaw = (
        "import contextlib, os, signal, time\n"
        f"time.sleep({seconds!r})\n"
        f"for pid in {frozen!r}:\n"
        "    with contextlib.suppress(ProcessLookupError):  # killed while frozen\n"
        "        os.kill(pid, signal.SIGCONT)\n"
    )
    with _one_freeze_at_a_time:
        helper = subprocess.Popen([sys.executable, "-c", thaw], start_new_session=True)
        for pid in frozen:  # the worker first: its heartbeats stop with this handler
            os.kill(pid, signal.SIGSTOP)
        # The stop reaches every thread, this one included, only a moment later: wait for
        # the thaw so the handler cannot finish before it.
        helper.wait()


def payload(kind: str, lease_seconds: float, rng: random.Random) -> dict[str, Any]:
    if kind == "ordinary":
        return {"work_s": rng.uniform(0.002, 0.02)}
    if kind == "flaky":
        return {"retry_in_s": 0.2}
    if kind == "slow":
        return {"work_s": 1.5 * lease_seconds}
    if kind == "stall":
        return {"freeze_s": 1.5 * lease_seconds}
    return {}


def plan(total: int, rng: random.Random) -> list[str]:
    """`total` kinds in a random order, each kind at least once, in the shares of KINDS."""
    counts = {k.name: max(1, round(k.share * total)) for k in KINDS}
    counts["ordinary"] += total - sum(counts.values())
    if counts["ordinary"] < 1:
        raise ValueError(f"the mix needs at least {total - counts['ordinary'] + 1} jobs")
    kinds = [name for name, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    return kinds


def enqueue_mix(
    queue: Any, engine: Engine, total: int, *, queue_name: str, lease_seconds: float, seed: int
) -> dict[int, str]:
    """Enqueue the mix in one transaction; returns job id -> kind."""
    rng = random.Random(seed)
    by_name: Mapping[str, Kind] = {k.name: k for k in KINDS}
    ids: dict[int, str] = {}
    with engine.begin() as conn:
        for name in plan(total, rng):
            kind = by_name[name]
            res = queue.enqueue(
                name,
                payload(name, lease_seconds, rng),
                queue=queue_name,
                delay=rng.uniform(0, kind.spread * lease_seconds),
                priority=kind.priority,
                max_attempts=kind.max_attempts,
                conn=conn,
            )
            ids[res.id] = name
    return ids
