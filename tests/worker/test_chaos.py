"""Chaos on both backends: 300 jobs, 8 worker processes started through the command line,
SIGKILLs from poison jobs and from this supervisor, whole processes frozen past their
lease, jobs that always fail. Then the invariant, read straight from the database:
every job that can succeed is done with exactly one ledger row written by its
completion's effect; every hopeless or poison job is dead after exactly max_attempts;
nothing is lost or left running. No timing is asserted except a generous deadline.
"""

from __future__ import annotations

import io
import random
import signal
from collections import Counter

import sqlalchemy as sa

from queuecore.demo import WorkerPool, fixed_sqlite_driver, supervise, worker_command
from queuecore.demo_jobs import KINDS, enqueue_mix, ledger
from queuecore.schema import jobs

JOBS = 300
WORKERS = 8
LEASE_SECONDS = 1.5
KILL_EVERY = 1.5
DEADLINE = 240.0


def test_chaos_every_job_ends_as_its_kind_must_with_exactly_one_effect(make_queue, dsn, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    queue = make_queue(clock=None, lease_seconds=LEASE_SECONDS)
    ledger.create(queue.engine, checkfirst=True)
    queue_name = f"chaos-{seed:x}"
    kinds = enqueue_mix(
        queue,
        queue.engine,
        JOBS,
        queue_name=queue_name,
        lease_seconds=LEASE_SECONDS,
        seed=seed,
    )
    log_path = tmp_path / "workers.log"
    with open(log_path, "ab") as log:
        command = worker_command(queue_name, 2, LEASE_SECONDS, fixed_sqlite_driver(dsn))
        pool = WorkerPool(command, WORKERS, log, dsn=dsn)
        try:
            supervise(queue, queue_name, JOBS, pool, rng, KILL_EVERY, DEADLINE, io.StringIO())
        finally:
            stop_codes = pool.stop()

    with queue.engine.connect() as conn:
        found = {
            row.id: row
            for row in conn.execute(
                sa.select(jobs.c.id, jobs.c.kind, jobs.c.state, jobs.c.attempts).where(
                    jobs.c.queue == queue_name
                )
            )
        }
        effects = Counter(
            conn.execute(sa.select(ledger.c.job_id).where(ledger.c.queue == queue_name)).scalars()
        )
    context = f"seed {seed}; worker log in {log_path}"
    assert found.keys() == kinds.keys(), f"jobs lost: {context}"
    rules = {k.name: k for k in KINDS}
    wrong = []
    for job_id, row in found.items():
        if not rules[kinds[job_id]].ended_right(row.state, row.attempts, effects[job_id]):
            wrong.append((job_id, row.kind, row.state, row.attempts, effects[job_id]))
    assert wrong == [], f"(id, kind, state, attempts, ledger rows); {context}"
    assert set(effects) <= set(found), "a ledger row for a job of no one"

    # The chaos really happened: both kinds of SIGKILL, and the stops were graceful.
    poison_deaths = pool.exits[-signal.SIGKILL] - pool.killed
    assert pool.killed >= 3 and poison_deaths >= 3, (pool.killed, pool.exits, context)
    assert all(code in (0, -signal.SIGTERM) for code in stop_codes), f"{stop_codes} {context}"
    assert sum(n for code, n in pool.exits.items() if code != -signal.SIGKILL) == 0, context
