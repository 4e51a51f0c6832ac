"""Databases for the swap tests: a pair for each direction, and a reading of every row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.sql.schema import jobs

DIRECTIONS = (
    "sqlite-to-postgresql",
    "postgresql-to-sqlite",
    "sqlite-to-mariadb",
    "mariadb-to-postgresql",
)


def new_database(kind: str, request: pytest.FixtureRequest, tmp_path: Path, name: str) -> str:
    """An empty, migrated database of this backend, private to the test."""
    folder = tmp_path / name
    folder.mkdir()
    dsn = request.getfixturevalue("harnesses").started(kind).unmigrated(folder)
    queuecore.migrate(dsn)
    return dsn


def new_pair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(source, target) for a fixture parametrized by direction ("sqlite-to-postgresql")."""
    source_kind, _, target_kind = request.param.split("-")
    source = new_database(source_kind, request, tmp_path, "source")
    return source, new_database(target_kind, request, tmp_path, "target")


def rows(dsn: str) -> dict[int, dict[str, Any]]:
    """Every column of every job (whatever columns the schema has), by id."""
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            return {r.id: dict(r._mapping) for r in conn.execute(sa.select(*jobs.c))}
    finally:
        engine.dispose()
