"""The benchmark's harness, in a tiny form: the floors and queuecore's runners must drain
every job exactly once and leave every job done, or the ratios they print mean nothing.
No timing is checked here (and the benchmark itself never runs in the test suite)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from backends import mariadb_harness
from benchmarks import burst, databases, enqueue, mariadb_family, worker_e2e
from benchmarks.checks import Check, check, exit_status
from benchmarks.floors import SQLiteOneStatementFloor
from benchmarks.harness import build_parser, plan_of
from benchmarks.implementations import (
    FLOOR,
    FLOOR_ONE_STATEMENT,
    QUEUECORE,
    QUEUECORE_ASYNC,
    QUEUECORE_BATCHED,
)
from benchmarks.throughput import Databases, measure

PGQUEUER_NAME = worker_e2e.PGQUEUER_WORKER

JOBS = 300
SHAPES = [(FLOOR, 1), (FLOOR, 10), (QUEUECORE_BATCHED, 10), (QUEUECORE_ASYNC, 1)]


@pytest.fixture
def postgres(postgres_server: str) -> Iterator[databases.PostgresDatabases]:
    server = databases.PostgresDatabases(postgres_server)
    yield server
    server.drop_all()


def _read(url: str, sql: str) -> list[sa.Row[Any]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(sql).all()
    engine.dispose()
    return list(rows)


def _states(url: str) -> dict[str, int]:
    rows = _read(
        url, "SELECT state, attempts, count(*) FROM queuecore_jobs GROUP BY state, attempts"
    )
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


def test_sqlite_one_statement_floor_drains_every_job_once(tmp_path: Path):
    target = Databases(tmp_path, None).prepare(FLOOR_ONE_STATEMENT, "sqlite", "NORMAL", JOBS)
    assert measure(FLOOR_ONE_STATEMENT, target, workers=2, limit=1, jobs=JOBS).exactly_once
    assert _states(target.url) == {"done/1": JOBS}


def test_one_statement_floor_writes_a_lease_lost_on_the_last_attempt_dead(tmp_path: Path):
    """R08 as amended, by hand: the row met first is out of attempts with its lease over,
    so the claim writes it dead (lease end as its finish) and hands out the next one."""
    target = Databases(tmp_path, None).prepare(FLOOR_ONE_STATEMENT, "sqlite", "NORMAL", 2)
    conn = sqlite3.connect(target.location, isolation_level=None)
    conn.execute(
        "UPDATE queuecore_jobs SET state = 'running', attempts = max_attempts, "
        "visible_at = visible_at - 100, lease_token = 'old' WHERE id = 1"
    )
    floor = SQLiteOneStatementFloor(target.location, synchronous="NORMAL")
    [job] = floor.claim("w", 1)
    assert job[0] == 2 and floor.claim("w", 1) == []
    floor.close()
    state, error, token, finished, visible = conn.execute(
        "SELECT state, last_error, lease_token, finished_at, visible_at FROM queuecore_jobs "
        "WHERE id = 1"
    ).fetchone()
    conn.close()
    assert (state, error, token) == ("dead", "lease expired on the last attempt", None)
    assert finished == visible


@pytest.mark.parametrize(
    "implementation", [worker_e2e.WORKER, worker_e2e.LOOP, worker_e2e.HUEY_CONSUMER]
)
def test_sqlite_worker_processes_drain_every_job_once(tmp_path: Path, implementation: str):
    dbs = Databases(tmp_path, None)
    target = dbs.prepare(worker_e2e.SEEDS[implementation], "sqlite", "NORMAL", JOBS)
    run = worker_e2e.measure(implementation, target, 2, JOBS, tmp_path)
    assert run.exactly_once and run.seconds > 0 and run.start_s > 0


def test_the_drains_end_is_found_by_the_live_jobs_index_not_a_scan_of_done_ones(
    tmp_path: Path,
):
    """The harness asks every POLL_S whether a job is left; a scan past the jobs already
    done took a third of a core from the SQLite worker it measured (issue 29). From about
    a thousand jobs on, SQLite's planner preferred that scan to the index."""
    target = Databases(tmp_path, None).prepare(QUEUECORE, "sqlite", "NORMAL", 1000)
    remaining = worker_e2e.Remaining(worker_e2e.WORKER, target)
    conn = sqlite3.connect(target.location, isolation_level=None)
    try:
        conn.execute("UPDATE queuecore_jobs SET state = 'done', finished_at = 1 WHERE id < 900")
        plan = " ".join(str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {remaining.sql}"))
        assert "USING INDEX ix_queuecore_jobs_ready" in plan, plan
        assert remaining() == 1
        conn.execute("UPDATE queuecore_jobs SET state = 'done', finished_at = 1")
        assert remaining() == 0
    finally:
        conn.close()
        remaining.close()


@pytest.mark.parametrize("implementation", [worker_e2e.WORKER, worker_e2e.PGQUEUER_WORKER])
def test_postgresql_worker_processes_drain_every_job_once(
    tmp_path: Path, postgres: databases.PostgresDatabases, implementation: str
):
    dbs = Databases(tmp_path, postgres)
    target = dbs.prepare(worker_e2e.SEEDS[implementation], "postgresql", "", JOBS)
    assert worker_e2e.measure(implementation, target, 2, JOBS, tmp_path).exactly_once
    if implementation == worker_e2e.WORKER:
        assert _states(target.url) == {"done/1": JOBS}


def _planner_rows(url: str) -> float:
    """What the planner believes the queue table holds: -1 until it is first analyzed."""
    [(rows,)] = _read(url, "SELECT reltuples FROM pg_class WHERE relname = 'queuecore_jobs'")
    return float(rows)


def test_the_burst_family_drains_an_analyzed_and_a_never_analyzed_table(
    tmp_path: Path, postgres: databases.PostgresDatabases
):
    dbs = Databases(tmp_path, postgres)
    fresh, analyzed = dbs.prepare_unanalyzed(JOBS), dbs.prepare(QUEUECORE, "postgresql", "", JOBS)
    assert (_planner_rows(fresh.url), _planner_rows(analyzed.url)) == (-1, JOBS)
    assert _states(fresh.url) == {"queued/0": JOBS}
    results = burst.run(dbs, (1,), JOBS, 1, lambda _: None)
    assert all(results.median(1, table) for table in (burst.ANALYZED, burst.UNANALYZED))
    assert "never analyzed" in "\n".join(burst.table(results))


def test_burst_targets_are_checked_on_the_ratio():
    held, missed = burst.Results((1,), 100), burst.Results((1,), 100)
    held.rates = {(1, burst.ANALYZED): [1000.0], (1, burst.UNANALYZED): [850.0]}
    missed.rates = {(1, burst.ANALYZED): [1000.0], (1, burst.UNANALYZED): [450.0]}
    checks: list[Check] = []
    burst.targets(held, checks)
    burst.targets(missed, checks)
    assert [c["held"] for c in checks] == [True, False]


@pytest.mark.parametrize("shape", [enqueue.SINGLE, enqueue.MANY])
@pytest.mark.parametrize("implementation", [QUEUECORE, QUEUECORE_ASYNC, FLOOR])
def test_enqueue_runs_write_what_they_time(
    tmp_path: Path, postgres: databases.PostgresDatabases, implementation: str, shape: str
):
    for backend in ("sqlite", "postgresql"):
        target = Databases(tmp_path, postgres).prepare(implementation, backend, "NORMAL", 0)
        assert enqueue.measure(implementation, target, shape, 20) > 0
        assert _states(target.url) == {"queued/0": 20 + enqueue.WARM_UP}


def _worker_row(**medians: float) -> worker_e2e.Row:
    row = worker_e2e.Row("postgresql", 4)
    for implementation, rate in medians.items():
        row.runs[implementation] = [worker_e2e.Run(rate, 1.0, 0.5, True)]
    return row


def test_worker_targets_are_checked_on_the_ratios():
    """Against the loop (0.7x), the async handler against the sync one (0.8x), and
    pgqueuer's worker with 4 processes (1.5x)."""
    rates = {worker_e2e.LOOP: 1000, PGQUEUER_NAME: 500}
    held = _worker_row(**{worker_e2e.WORKER: 800, worker_e2e.WORKER_ASYNC: 640, **rates})
    missed = _worker_row(**{worker_e2e.WORKER: 600, worker_e2e.WORKER_ASYNC: 470, **rates})
    checks: list[Check] = []
    worker_e2e.targets([held], checks)
    assert [c["held"] for c in checks] == [True, True, True]
    assert exit_status(checks) == 0
    worker_e2e.targets([missed], checks)
    assert [c["held"] for c in checks[3:]] == [False, False, False]
    assert exit_status(checks) == 1


def test_a_target_that_could_not_be_measured_is_missed():
    checks: list[Check] = []
    check(checks, "peer not installed", None, 1.0)
    assert checks[0]["held"] is False and exit_status(checks) == 1


def test_quick_run_with_filters_narrows_every_family():
    args = build_parser().parse_args(["--quick", "--workers", "1", "--families", "worker"])
    plan = plan_of(args)
    assert (plan.workers, plan.e2e_processes, plan.repeats) == ((1,), (1,), 1)
    assert args.families == ("worker",)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--families", "nonsense"])


def test_mariadb_targets_are_checked_on_the_ratios():
    """Issue 29's: the worker against its loop (0.7x), four processes against one
    (1.5x), the one-connection loop against its mysqlclient floor (0.8x)."""
    W, L = worker_e2e.WORKER, worker_e2e.LOOP
    held = mariadb_family.Results((1, 4))
    held.workers = {(1, W): [1000.0], (1, L): [1200.0], (4, W): [1600.0], (4, L): [2000.0]}
    held.loops = {mariadb_family.QUEUECORE_LOOP: [90.0], mariadb_family.FLOOR: [100.0]}
    checks: list[Check] = []
    mariadb_family.targets(held, checks)
    assert [c["held"] for c in checks] == [True, True, True, True]
    missed = mariadb_family.Results((1, 4))
    missed.workers = {(1, W): [1000.0], (1, L): [1500.0], (4, W): [1400.0], (4, L): [2000.0]}
    missed.loops = {mariadb_family.QUEUECORE_LOOP: [70.0], mariadb_family.FLOOR: [100.0]}
    checks = []
    mariadb_family.targets(missed, checks)
    assert [c["held"] for c in checks] == [False, True, False, False]


def test_an_unreachable_mariadb_leaves_its_targets_missed(tmp_path: Path):
    results = mariadb_family.run(
        "mariadb+pymysql://root@127.0.0.1:1/test", (1,), 10, 1, tmp_path, lambda _: None
    )
    assert results.error is not None and not results.workers
    checks: list[Check] = []
    mariadb_family.targets(results, checks)
    assert checks and exit_status(checks) == 1


def test_the_mariadb_family_measures_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On the suite's MariaDB server: whole workers and the loop drain every job once
    (the drains check it), and the one-connection loops run beside their floor."""
    monkeypatch.setattr(mariadb_family, "FLOOR_JOBS", 20)
    dsn = os.environ.get(mariadb_harness.ENV_DSN, mariadb_harness.DEFAULT_DSN)
    results = mariadb_family.run(dsn, (1,), 40, 1, tmp_path, lambda _: None)
    assert results.error is None
    assert all(results.worker(1, i) for i in (worker_e2e.WORKER, worker_e2e.LOOP))
    assert all(results.loop(n) for n in (mariadb_family.QUEUECORE_LOOP, mariadb_family.FLOOR))
    assert "MariaDB, whole workers" in "\n".join(mariadb_family.table(results, 40))
