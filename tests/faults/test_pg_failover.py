"""A failover kept: a private primary with a synchronous streaming standby, two
`queuecore worker` processes on one multi-host DSN
(`?host=...&host=...&target_session_attrs=read-write`), and, part-way through the jobs,
the primary stopped as a crash would (immediate) and the standby promoted.

Afterwards (tests/faults/outage.py's verdict): every job done with exactly one ledger
row (its completion's effect), none dead, none reported failed, both workers alive
throughout and draining after the failover, and each worker said the outage once and
the recovery once. A synchronous standby is what makes it hold: every commit a worker
or a client was told of (an enqueue, a completion) is on the standby before it is
acknowledged, so the promoted server has it.

The servers are this module's own: nobody else's PostgreSQL is stopped.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.postgresql_server import PrivateCluster
from queuecore.demo.jobs import ledger
from tests.faults.helpers import scalar, wait_until
from tests.faults.outage import drain_through_fault, new_database
from tests.faults.standby import Standby, make_synchronous, multi_host_dsn

pytestmark = [
    pytest.mark.postgresql_only,
    pytest.mark.xdist_group("private-pg-failover"),
    pytest.mark.slow,
]

JOBS, WORKERS = 400, 2


@pytest.fixture
def servers(server_binaries: Path) -> Iterator[tuple[PrivateCluster, Standby, str]]:
    """The primary (with the test's database, migrated), its synchronous standby, and the
    database's multi-host DSN naming both."""
    with PrivateCluster(server_binaries) as primary:
        name = sa.make_url(new_database(primary.dsn)).database
        assert name is not None
        with Standby(primary) as standby:
            make_synchronous(primary)
            yield primary, standby, multi_host_dsn(name, primary, standby)


def test_workers_on_a_multi_host_dsn_go_through_a_failover_with_every_job_done_once(
    servers: tuple[PrivateCluster, Standby, str], tmp_path: Path
) -> None:
    primary, standby, dsn = servers
    recovered: list[float] = []

    def ledger_rows() -> int:
        return int(scalar(dsn, f"SELECT count(*) FROM {ledger.name}"))

    def failover() -> None:
        primary.stop("immediate")
        standby.promote()
        promoted = time.monotonic()
        before = ledger_rows()
        wait_until(lambda: ledger_rows() > before, "a job is completed on the promoted server")
        recovered.append(time.monotonic() - promoted)

    with queuecore.connect(dsn) as queue:
        states = drain_through_fault(
            dsn, queue, failover, "failover", tmp_path, workers=WORKERS, ordinary=JOBS, hopeless=0
        )
    assert states == {"done": JOBS}
    log = (tmp_path / "workers.log").read_text()
    said = Counter(re.findall(r"\[(\d+)\]: queuecore: database connection (lost|back)", log))
    processes = {pid for pid, _ in said}
    assert processes, "no worker process noticed the failover"
    assert said == {(pid, way): 1 for pid in processes for way in ("lost", "back")}, said
    print(f"failover: first completion on the promoted server {recovered[0]:.1f}s after it")
