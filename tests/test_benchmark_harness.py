"""The benchmark's harness, in a tiny form: the floors and queuecore's runners must drain
every job exactly once and leave every job done, or the ratios they print mean nothing.
No timing is checked here (and the benchmark itself never runs in the test suite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchmarks import databases
from benchmarks.implementations import FLOOR, QUEUECORE_BATCHED
from benchmarks.throughput import Databases, measure

JOBS = 300
SHAPES = [(FLOOR, 1), (FLOOR, 10), (QUEUECORE_BATCHED, 10)]


@pytest.fixture
def postgres(postgres_server: str) -> Iterator[databases.PostgresDatabases]:
    server = databases.PostgresDatabases(postgres_server)
    yield server
    server.drop_all()


def _states(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT state, attempts, count(*) FROM queuecore_jobs GROUP BY state, attempts"
        ).all()
    engine.dispose()
    return {f"{state}/{attempts}": count for state, attempts, count in rows}


@pytest.mark.parametrize(("implementation", "limit"), SHAPES)
def test_sqlite_runs_drain_every_job_once(tmp_path: Path, implementation: str, limit: int):
    target = Databases(tmp_path, None).prepare(implementation, "sqlite", "NORMAL", JOBS)
    assert measure(implementation, target, workers=2, limit=limit, jobs=JOBS).exactly_once
    assert _states(target.url) == {"done/1": JOBS}


@pytest.mark.parametrize(("implementation", "limit"), SHAPES)
def test_postgresql_runs_drain_every_job_once(
    tmp_path: Path, postgres: databases.PostgresDatabases, implementation: str, limit: int
):
    target = Databases(tmp_path, postgres).prepare(implementation, "postgresql", "", JOBS)
    assert measure(implementation, target, workers=2, limit=limit, jobs=JOBS).exactly_once
    assert _states(target.url) == {"done/1": JOBS}
