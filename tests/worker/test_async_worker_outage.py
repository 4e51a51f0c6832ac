"""An outage does not kill an `AsyncWorker`: its PostgreSQL server stops (a crash-like
immediate stop) for longer than the queue's own reconnect pauses while handlers run,
then comes back. The worker waits, resumes, and finishes every job without blaming the
outage on any (each done on its first attempt, no error), as the sync worker does.

The server is a `PrivateCluster` of this module's own: the suite's shared server is never
stopped. No timing is asserted except generous deadlines.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from queuecore.executors.reconnect import PAUSES
from tests.faults.helpers import PATIENCE

# One private cluster for the module: its tests run on one process of a parallel run.
pytestmark = [pytest.mark.postgresql_only, pytest.mark.xdist_group("private-pg-async")]

JOBS, CONCURRENCY = 40, 4
OUTAGE = sum(PAUSES) + 2.5  # longer than the queue's own retries: the worker must outlast it


@pytest.fixture(scope="module")
def cluster(server_binaries: Path) -> Iterator[PrivateCluster]:
    with PrivateCluster(server_binaries) as running:
        yield running


@pytest.fixture
def database(cluster: PrivateCluster) -> str:
    name = f"async_outage_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(cluster.dsn, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    dsn = sa.make_url(cluster.dsn).set(database=name).render_as_string(hide_password=False)
    queuecore.migrate(dsn)
    return dsn


@pytest.mark.slow
def test_an_async_worker_waits_out_a_server_outage_and_resumes(
    cluster: PrivateCluster, database: str
) -> None:
    with queuecore.connect(database) as queue:
        ids = queue.enqueue_many("step", [{"n": n} for n in range(JOBS)])

    async def step(job: queuecore.Job) -> dict[str, int]:
        await asyncio.sleep(0.2)
        return {"n": job.payload["n"]}

    def done() -> int:
        with queuecore.connect(database) as reader:
            return sum(reader.get(i).state == "done" for i in ids)

    async def scenario() -> None:
        async with queuecore.connect_async(database) as aqueue:
            worker = queuecore.AsyncWorker(
                aqueue, {"step": step}, concurrency=CONCURRENCY, poll_interval=0.2
            )
            running = asyncio.create_task(worker.run(handle_signals=False))
            deadline = time.monotonic() + PATIENCE
            while await asyncio.to_thread(done) < CONCURRENCY:
                assert time.monotonic() < deadline and not running.done()
                await asyncio.sleep(0.05)
            await asyncio.to_thread(cluster.stop, "immediate")
            await asyncio.sleep(OUTAGE)  # handlers finish meanwhile; reports must wait
            assert not running.done(), "the outage ended the worker"
            await asyncio.to_thread(cluster.start)
            while await asyncio.to_thread(done) < JOBS:
                assert time.monotonic() < deadline + OUTAGE and not running.done()
                await asyncio.sleep(0.1)
            worker.stop()
            await asyncio.wait_for(running, PATIENCE)

    asyncio.run(scenario())
    with queuecore.connect(database) as queue:
        snaps = [queue.get(i) for i in ids]
    wrong = [(s.id, s.state, s.attempts, s.last_error) for s in snaps if s.attempts != 1]
    assert wrong == [], "an outage was blamed on a job"
    assert [s.result for s in snaps] == [{"n": n} for n in range(JOBS)]
    assert all(s.last_error is None for s in snaps)
