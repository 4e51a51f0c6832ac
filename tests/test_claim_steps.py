"""The claim in steps (MariaDB's): its lists of ids are bound one parameter each, at a
few sizes, each a statement compiled once, not a list compiled again on every call; and
it runs in a transaction on the hot path's own driver connection, rolled back when a
step fails."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.core.sized import bucket, listed


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
