"""Workers on separate network hosts (namespaces, tests/faults/netns.py), each running
`queuecore worker` against the database's address on its own link. One host is cut off
while its handlers run, for longer than their lease, and healed.

Meanwhile the other host takes the cut one's jobs once their leases end. Afterwards:
every job is done with exactly one ledger row (the row is the completion's effect,
written in its transaction), the cut host's late reports were fenced off (its lease
token no longer matches), and the cut host went on working after the heal without a
restart. The PostgreSQL server is this module's own, listening on the links' addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from queuecore.demo.pool import WorkerPool, worker_command
from queuecore.demo.verdict import outcomes
from tests.faults.helpers import rows, wait_until
from tests.faults.netns import MISSING, Host, hosts
from tests.faults.outage import completions_by_pid, new_database, unfinished

pytestmark = [pytest.mark.postgresql_only, pytest.mark.xdist_group("netns"), pytest.mark.slow]

LEASE_SECONDS = 2.0
WORK_SECONDS = 1.0  # each handler's: the cut comes while some run
FIRST, SECOND = 8, 12  # jobs before the cut (the other host runs out of fresh ones), after
FENCED = "finished after its lease was lost"


@pytest.fixture(scope="module")
def network() -> Iterator[list[Host]]:
    if MISSING:  # .ci/run fails a run that skipped a PostgreSQL test
        pytest.skip(
            f"NO NETWORK NAMESPACES ({MISSING}): the PostgreSQL tests of workers on "
            "separate hosts cannot run"
        )
    with hosts(2) as made:
        yield made


@pytest.fixture(scope="module")
def cluster(server_binaries: Path, network: list[Host]) -> Iterator[PrivateCluster]:
    """A server listening on 127.0.0.1 and on each host's link, trusting each host."""
    with PrivateCluster(server_binaries) as running:
        addresses = ",".join(["127.0.0.1", *(host.database for host in network)])
        running._configure(listen_addresses=addresses)
        assert running.folder is not None
        with (running.folder / "data" / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"host all all {host.inside}/32 trust\n" for host in network)
        running.restart()
        yield running


def held_by(dsn: str, pid: int, *, started: bool = False) -> set[int]:
    """The jobs the worker of `pid` holds (claimed, not yet reported); with `started`,
    only those whose handlers started (W9: a job held ahead of a busy slot is not)."""
    found = rows(
        dsn,
        "SELECT id FROM queuecore_jobs WHERE state = 'running' AND worker LIKE :w"
        + (" AND started_at IS NOT NULL" if started else ""),
        w=f"%-{pid}",
    )
    return {job_id for (job_id,) in found}


def taken_over(dsn: str, ids: set[int], pid: int) -> bool:
    """Every one of `ids` was claimed again by the worker of `pid` (and maybe done)."""
    found = rows(dsn, "SELECT id, worker FROM queuecore_jobs WHERE worker LIKE :w", w=f"%-{pid}")
    return ids <= {job_id for job_id, _ in found}


def test_a_host_cut_off_past_its_lease_is_fenced_off_and_resumes_without_a_restart(
    cluster: PrivateCluster, network: list[Host], tmp_path: Path
) -> None:
    database = new_database(cluster.dsn)
    cut = network[0]
    queue_name = "hosts"
    pools: list[WorkerPool] = []
    logs = [tmp_path / f"{host.name}.log" for host in network]
    with queuecore.connect(database) as queue:
        queue.enqueue_many("ordinary", [{"work_s": WORK_SECONDS}] * FIRST, queue=queue_name)
        try:
            for host, log in zip(network, logs, strict=True):
                over_link = sa.make_url(database).set(host=host.database)
                pool = WorkerPool(
                    host.command(worker_command(queue_name, 2, LEASE_SECONDS)),
                    1,
                    open(log, "ab"),  # noqa: SIM115 (closed with the pool, below)
                    dsn=over_link.render_as_string(hide_password=False),
                )
                pool.start()
                pools.append(pool)
            cut_pid, other_pid = (pool.procs[0].pid for pool in pools)
            # Started, not only claimed: a job held ahead when its lease is lost is never
            # started (W9), and leaves no late report to fence off (CI of afe224f).
            wait_until(
                lambda: held_by(database, cut_pid, started=True), "the host to cut runs jobs"
            )
            cut.partition()
            try:
                stranded = held_by(database, cut_pid)
                # Its leases end, and the other host takes its jobs: cut off till then.
                wait_until(
                    lambda: taken_over(database, stranded, other_pid),
                    f"the other host took over jobs {sorted(stranded)}",
                )
            finally:
                cut.heal()
            wait_until(lambda: unfinished(queue, queue_name) == 0, "every job is finished")
            before = completions_by_pid(database, queue_name)

            def healed_host_completed() -> bool:
                # Its connections come back when TCP retries them, which takes longer on a
                # loaded machine: until then the other host takes every job, so jobs keep
                # coming, a batch at a time, until the healed host has done one.
                if unfinished(queue, queue_name) == 0:
                    queue.enqueue_many(
                        "ordinary", [{"work_s": WORK_SECONDS / 4}] * SECOND, queue=queue_name
                    )
                    enqueued.append(SECOND)
                return (completions_by_pid(database, queue_name) - before)[cut_pid] > 0

            enqueued = [FIRST]
            wait_until(healed_host_completed, "the healed host completes jobs again")
            wait_until(lambda: unfinished(queue, queue_name) == 0, "every job is finished")
            alive = [pool.procs[0].poll() is None for pool in pools]
        finally:
            codes = [pool.stop() for pool in pools]
            for pool in pools:
                pool.log.close()
        found = outcomes(queue, queue_name)
    said = [log.read_text() for log in logs]
    assert alive == [True, True] and codes == [[0], [0]], said[0][-3000:]
    assert len(found) == sum(enqueued)
    assert {(r["state"], r["ledger"]) for r in found} == {("done", 1)}, said[0][-3000:]
    fenced = len(re.findall(FENCED, said[0]))
    assert stranded and fenced >= 1, said[0][-3000:]
    retried = sum(r["attempts"] > 1 for r in found)
    print(  # shown with -s: what the partition did
        f"partition: {len(found)} jobs, {sum(r['ledger'] for r in found)} ledger rows, "
        f"{retried} run again after the cut, {fenced} late report(s) fenced off"
    )
