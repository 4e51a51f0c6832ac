"""The claim in steps (MariaDB's): its lists of ids are bound one parameter each, at a
few sizes, each a statement compiled once, not a list compiled again on every call; and
it runs in a transaction on the hot path's own driver connection, rolled back when a
step fails."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.core.claim_steps import MARGIN
from queuecore.core.sized import bucket, listed, listed_as_rows


def test_a_list_is_bound_at_the_next_power_of_two():
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 5, 9, 64, 65)] == [1, 1, 2, 4, 4, 8, 16, 64, 128]


def test_a_list_is_padded_with_its_last_id():
    assert listed("id", [7, 3, 5], 4) == {"id_0": 7, "id_1": 3, "id_2": 5, "id_3": 5}
    assert listed("passed", [9], 1) == {"passed_0": 9}


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_the_claim_in_steps_takes_no_connection_from_the_pool(dsn):
    """It runs on the calling thread's own driver connection, as every other hot-path
    operation does: a pool checkout and SQLAlchemy's execution path per claim cost more
    client time than the claim's own round trips (issue 29)."""
    with queuecore.connect(dsn) as queue:
        queue.enqueue_many("k", [{}] * 25)
        assert len(queue.claim("w")) == 1  # the thread's connection is made here
        checkouts: list[object] = []
        sa.event.listen(queue.engine.pool, "checkout", lambda *args: checkouts.append(args))
        for _ in range(20):
            assert len(queue.claim("w", limit=1)) == 1
        assert checkouts == []


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_a_claim_that_fails_part_way_leaves_no_lock_and_no_write(make_queue, monkeypatch):
    """The claim's write fails after its rows were locked: the transaction on the
    driver connection is rolled back, so another claim takes the same first job at
    once, its first attempt (left open, the lock would make that claim skip it)."""
    queue, other = make_queue(), make_queue()
    first = queue.enqueue_many("k", [{}] * 3)[0]
    steps = queue.ops.claim_steps(None, None)
    broken = queue.ops.compile(sa.text("UPDATE queuecore_no_such_table SET x = 1"))
    monkeypatch.setattr(steps, "write_claimed", lambda size: broken)
    with pytest.raises(Exception, match="queuecore_no_such_table"):
        queue.claim("w")
    monkeypatch.undo()
    taken = other.claim("w2")
    assert [(job.id, job.attempts) for job in taken] == [(first, 1)]


@contextmanager
def _turn_held(queue):
    """Another session of the same database holds the claims' turn, as a claim would,
    and gives it back on the way out."""
    from backends.mariadb import TURN

    with queue.engine.connect() as holder:
        assert holder.exec_driver_sql(f"SELECT GET_LOCK({TURN}, 0)").scalar() == 1
        try:
            yield
        finally:
            holder.exec_driver_sql(f"DO RELEASE_LOCK({TURN})")


def _waiting_for_the_turn(queue) -> bool:
    from backends.mariadb import TURN

    with queue.engine.connect() as conn:
        waiting = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE STATE = 'User lock' AND INFO LIKE %s",
            (f"%GET_LOCK({TURN}%",),
        ).scalar()
    return bool(waiting)


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_a_claim_locks_only_what_it_takes_and_one_that_must_read_on_puts_claims_in_turns(
    dsn,
):
    """Side by side, large claims read the head another had locked and read on, and
    four processes drained 0.57x what one did (issue 29). A claim locks only the
    candidates it takes, in claim order. Claims that meet no other read only what they
    want; one that must read again has the queue's claims read a margin more; one that
    must read again despite the margin puts them in turns (a turn costs two
    statements a claim)."""
    with queuecore.connect(dsn) as queue:
        ids = queue.enqueue_many("k", [{}] * (3 * MARGIN))
        with queue.engine.connect() as other, other.begin():

            def hold(held: list[int]) -> None:  # by id: a scan would lock every row it reads
                listed = ", ".join(map(str, held))
                other.exec_driver_sql(
                    f"SELECT id FROM queuecore_jobs FORCE INDEX (PRIMARY) WHERE id IN ({listed}) "
                    "FOR UPDATE"
                )

            hold(ids[1 : MARGIN + 1])
            contention = queue.ops.contention
            assert [job.id for job in queue.claim("w")] == ids[:1]
            assert (contention.margin(), contention.turns()) == (0, False)  # met no claim
            assert [job.id for job in queue.claim("w")] == ids[MARGIN + 1 : MARGIN + 2]
            assert (contention.margin(), contention.turns()) == (MARGIN, False)
            with queue.engine.connect() as third, third.begin():
                free = third.exec_driver_sql(
                    "SELECT id FROM queuecore_jobs WHERE state = 'queued' FOR UPDATE SKIP LOCKED"
                ).scalars()
                assert list(free) == ids[MARGIN + 2 :]  # the claims hold no candidate
            hold(ids[MARGIN + 2 : 2 * MARGIN + 2])  # more held than the margin covers
            taken = queue.claim("w")
        assert [job.id for job in taken] == ids[2 * MARGIN + 2 : 2 * MARGIN + 3]
        assert contention.turns()


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_a_claim_in_turns_waits_while_another_claim_has_the_turn(dsn):
    """Claims in turns (`ClaimTurns`): while another session holds the turn, the claim
    waits; given it, the claim runs."""
    with queuecore.connect(dsn) as queue:
        first = queue.enqueue_many("k", [{}] * 3)[0]
        queue.ops.contention.read_again(MARGIN)
        queue.backend.turns.wait_seconds = 3600
        claimed: list[list[queuecore.Job]] = []
        claimer = threading.Thread(target=lambda: claimed.append(queue.claim("w")))
        with _turn_held(queue):
            claimer.start()
            deadline = time.monotonic() + 60
            while not _waiting_for_the_turn(queue):
                assert time.monotonic() < deadline, "the claim never waited for its turn"
                time.sleep(0.05)
            assert claimer.is_alive() and not claimed
        claimer.join(60)
        assert [job.id for job in claimed[0]] == [first]


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_a_claim_whose_turn_does_not_come_claims_without_it_and_so_do_the_next(dsn):
    """The turn is a courtesy: a claimer stopped while holding it costs the others one
    wait, then they claim side by side (the row locks keep R05) for `rest_seconds`."""
    with queuecore.connect(dsn) as queue:
        ids = queue.enqueue_many("k", [{}] * 3)
        queue.ops.contention.read_again(MARGIN)
        with _turn_held(queue):
            queue.backend.turns.wait_seconds = 0.01
            assert [job.id for job in queue.claim("w")] == ids[:1]
            queue.backend.turns.wait_seconds = 3600  # were it asked for again: an hour
            claimed: list[list[queuecore.Job]] = []
            claimer = threading.Thread(target=lambda: claimed.append(queue.claim("w")))
            claimer.start()
            claimer.join(60)
            assert not claimer.is_alive(), "the next claim waited for the turn again"
            assert [job.id for job in claimed[0]] == ids[1:2]


@pytest.mark.mariadb_only
@pytest.mark.parametrize("backend", ["mariadb"])
def test_the_claims_lock_holds_only_the_rows_it_takes(dsn):
    """The lock of the candidates stops at the claim's size: filtered and sorted after
    the rows were read, it had locked every due candidate until its claim committed,
    and a claim beside it that read the same ones found them all held (issue 29)."""
    with queuecore.connect(dsn) as queue:
        ids = queue.enqueue_many("k", [{}] * 10)
        size = bucket(len(ids))
        lock = queue.ops.claim_steps(None, None).lock(size)
        params = {**queue.ops.params(), **listed_as_rows("id", ids[::-1], size), "limit": 3}
        raw = queue.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("BEGIN")
            cursor.execute(lock.sql, lock.parameters(params))
            assert [row[0] for row in cursor.fetchall()] == ids[:-4:-1]  # in the list's order
            with queue.engine.connect() as other, other.begin():
                listed_ids = ", ".join(map(str, ids))
                free = other.exec_driver_sql(
                    f"SELECT id FROM queuecore_jobs FORCE INDEX (PRIMARY) "
                    f"WHERE id IN ({listed_ids}) FOR UPDATE SKIP LOCKED"
                ).scalars()
                assert list(free) == ids[:-3]
            cursor.execute("ROLLBACK")
            cursor.execute(lock.sql, lock.parameters({**params, "limit": size}))
            assert [row[0] for row in cursor.fetchall()] == ids[::-1]  # each once, padding none
        finally:
            raw.close()
