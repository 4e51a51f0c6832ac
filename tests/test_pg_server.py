"""The test servers themselves: a private cluster must survive what fault-injection tests
will do to it (restart, crash) and leave nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from queuecore.conformance.postgresql_server import (
    ENV_DSN,
    PrivateCluster,
    find_or_start_postgres,
    reachable,
)


def _rows(dsn: str) -> list[int]:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            return list(conn.exec_driver_sql("SELECT n FROM survivors ORDER BY n").scalars())
    finally:
        engine.dispose()


def _insert(dsn: str, n: int) -> None:
    engine = sa.create_engine(dsn)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS survivors (n int)")
            conn.exec_driver_sql(f"INSERT INTO survivors VALUES ({n})")
    finally:
        engine.dispose()


def test_private_cluster_restarts_and_recovers_from_a_crash(server_binaries: Path) -> None:
    with PrivateCluster(server_binaries) as cluster:
        folder = cluster.folder
        assert folder is not None and (folder / f".s.PGSQL.{cluster.port}").exists()
        _insert(cluster.dsn, 1)

        cluster.restart()
        assert _rows(cluster.dsn) == [1]

        _insert(cluster.dsn, 2)
        cluster.stop(mode="immediate")  # no checkpoint: the next start replays the WAL
        assert reachable(cluster.dsn) is not None
        cluster.start()
        assert _rows(cluster.dsn) == [1, 2]
    assert not folder.exists()


def test_without_a_dsn_the_suite_starts_its_own_server(
    server_binaries: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_DSN, raising=False)
    with find_or_start_postgres() as (dsn, problem):
        assert problem is None
        assert dsn is not None and reachable(dsn) is None
    assert reachable(dsn) is not None
