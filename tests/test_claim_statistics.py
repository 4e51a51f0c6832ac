"""PostgreSQL: a full claim whose plan sorts what it reads has the table analyzed
(`queuecore.core.statistics`), so a backlog that arrived faster than autovacuum looks
drains at the index's pace, not at the pace of a sort of the whole backlog per claim."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.core import statistics

ANALYZED = sa.text(
    "SELECT c.reltuples, s.analyze_count FROM pg_class c "
    "JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = 'queuecore_jobs'::regclass"
)


def analyzed(dsn: str) -> tuple[float, int]:
    """The table's row count as its statistics say (-1: never analyzed), and how many
    times a session analyzed it."""
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            rows, count = conn.execute(ANALYZED).one()
    finally:
        engine.dispose()
    return float(rows), int(count)


def claim_sorts(queue: Any) -> bool:
    """Whether the server plans the worker's claim shape (ten jobs of one kind) with a
    sort, asked as the queue asks."""
    check = queue.backend.claim_sort_check()
    claim = queue.ops.claim_plan(False, None, 1).steps[-1]
    params = {"limit": 10, "lease_seconds": 30.0, "token": "t", "claimant": "w", "kind_0": "k"}
    _, driver = queue.hot.connection()
    rows = driver.execute(claim.prefixed(check.explain).sql, claim.parameters(params)).fetchall()
    return bool(check.sorts(rows))


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_full_claim_planned_with_a_sort_has_the_table_analyzed(private_dsn, backend):
    with queuecore.connect(private_dsn) as queue:
        queue.enqueue_many("k", [{}] * 2000)
        assert analyzed(private_dsn)[0] == -1  # the planner guesses: it sorts
        assert claim_sorts(queue)
        assert len(queue.claim("w", limit=10, kinds=["k"])) == 10
        assert analyzed(private_dsn)[0] == 2000
        assert not claim_sorts(queue)  # it walks the index and stops at the limit


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_claim_planned_without_a_sort_analyzes_nothing(private_dsn, backend, monkeypatch):
    """The look is made (CHECK_SECONDS is 0 here, so every full claim looks), and finds
    nothing to mend."""
    monkeypatch.setattr(statistics, "CHECK_SECONDS", 0.0)
    with queuecore.connect(private_dsn) as queue:
        queue.enqueue_many("k", [{}] * 2000)
        with queue.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE queuecore_jobs"))
        before = analyzed(private_dsn)
        for _ in range(3):
            assert len(queue.claim("w", limit=10, kinds=["k"])) == 10
        assert analyzed(private_dsn) == before


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_plan_that_still_sorts_after_an_analyze_is_left_alone(private_dsn, backend, monkeypatch):
    """A sort the planner keeps with fresh statistics is its informed choice: one
    analyze, then no more for SETTLED_SECONDS, however many full claims look."""
    from queuecore.backends.postgresql import PostgresBackend

    monkeypatch.setattr(statistics, "CHECK_SECONDS", 0.0)
    always = statistics.ClaimSortCheck("EXPLAIN (FORMAT JSON)", lambda rows: True)
    monkeypatch.setattr(PostgresBackend, "claim_sort_check", lambda self: always)
    with queuecore.connect(private_dsn) as queue:
        queue.enqueue_many("k", [{}] * 100)
        before = analyzed(private_dsn)[1]
        for _ in range(4):
            assert len(queue.claim("w", limit=10, kinds=["k"])) == 10
        assert analyzed(private_dsn)[1] == before + 1


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_async_face_has_the_table_analyzed_too(private_dsn, backend):
    """The look is a step of the claim's plan, which the async queue runs too."""

    async def claim_once() -> int:
        queue = await queuecore.connect_async(private_dsn)
        try:
            await queue.enqueue_many("k", [{}] * 2000)
            return len(await queue.claim("w", limit=10, kinds=["k"]))
        finally:
            await queue.close()

    assert analyzed(private_dsn)[0] == -1
    assert asyncio.run(claim_once()) == 10
    assert analyzed(private_dsn)[0] == 2000
