"""A dropped PostgreSQL connection (what a restart or pg_terminate_backend does to a
client): the queue reconnects by itself, nothing is lost and nothing lands twice.

Only the connections this test opened to its own scratch database are terminated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import queuecore
from tests.faults.actors import create_ledger, write_ledger
from tests.faults.helpers import Terminator, rows

pytestmark = [pytest.mark.postgresql_only, pytest.mark.parametrize("backend", ["postgresql"])]


@pytest.fixture
def terminator(private_dsn: str, postgres_server: str) -> Iterator[Terminator]:
    killer = Terminator(postgres_server, sa.make_url(private_dsn).database)
    yield killer
    killer.admin.dispose()


@pytest.fixture
def queue(private_dsn: str, clock) -> Iterator[queuecore.Queue]:
    with queuecore.connect(private_dsn, clock=clock) as opened:
        yield opened


def backend_pid(conn: sa.Connection) -> int:
    return conn.connection.dbapi_connection.info.backend_pid


class CommitCutter:
    """Ends the connection just before its next COMMIT reaches the server: the client
    sees the commit fail and cannot know whether it landed (here it did not)."""

    def __init__(self, engine: sa.Engine, terminator: Terminator) -> None:
        self.armed = 0
        self.terminator = terminator
        sa.event.listen(engine, "commit", self._cut)

    def _cut(self, conn: sa.Connection) -> None:
        if self.armed:
            self.armed -= 1
            assert self.terminator.backend(backend_pid(conn)) == 1


def test_claims_and_completes_survive_terminated_connections(queue, private_dsn, terminator):
    create_ledger(private_dsn)
    cutter = CommitCutter(queue.engine, terminator)
    ids = queue.enqueue_many("pay", [{"n": n} for n in range(8)])

    def effect_that_loses_its_connection(job: queuecore.Job):
        runs = []

        def effect(conn: sa.Connection) -> None:
            runs.append(job.id)
            if len(runs) == 1:  # end our own connection in the middle of the effect
                assert terminator.backend(backend_pid(conn)) == 1
            write_ledger(job.id, "landed")(conn)

        return effect

    completed = []
    for n, job_id in enumerate(ids):
        fault = n % 4
        if fault == 0:  # idle pooled connections die between calls
            assert terminator.every_connection() >= 1
        (job,) = queue.claim("survivor")
        assert (job.id, job.attempts) == (job_id, 1)
        effect = write_ledger(job.id, "landed")
        if fault == 1:  # dies between the claim and the complete
            assert terminator.every_connection() >= 1
        elif fault == 2:  # dies inside the completing transaction, before COMMIT
            effect = effect_that_loses_its_connection(job)
        elif fault == 3:  # dies as COMMIT is sent
            cutter.armed = 1
        assert queue.complete(job, effect=effect)
        assert cutter.armed == 0
        completed.append(job.id)

    assert completed == ids
    assert sorted(r[0] for r in rows(private_dsn, "SELECT job_id FROM ledger")) == ids
    assert {(queue.get(i).state, queue.get(i).attempts) for i in ids} == {("done", 1)}
    assert queue.claim("survivor") == []


def cut_hot_connection(queue: queuecore.Queue, terminator: Terminator) -> None:
    """Ends the connection the hot path runs its one-statement autocommit writes on (an
    enqueue without a dedupe key, an enqueue_many): the next one cannot know whether its
    commit landed (here it did not)."""
    _, driver = queue.hot.connection()
    assert terminator.backend(driver.info.backend_pid) == 1


def test_enqueue_whose_commit_was_cut_off_is_retried_only_when_deduplicated(
    queue, private_dsn, terminator
):
    cutter = CommitCutter(queue.engine, terminator)
    cut_hot_connection(queue, terminator)
    with pytest.raises(queuecore.OutcomeUnknownError, match="dedupe_key"):
        queue.enqueue("plain", {})
    count = "SELECT count(*) FROM queuecore_jobs"
    assert rows(private_dsn, count) == [(0,)]  # this time it had not landed

    cutter.armed = 1
    res = queue.enqueue("keyed", {}, dedupe_key="k")
    assert cutter.armed == 0
    assert res.created
    assert rows(private_dsn, "SELECT id, dedupe_key FROM queuecore_jobs") == [(res.id, "k")]

    cut_hot_connection(queue, terminator)
    with pytest.raises(queuecore.OutcomeUnknownError):
        queue.enqueue_many("plain", [{}, {}])
    assert rows(private_dsn, count) == [(1,)]
    assert queue.stats()["queued"] == 1
