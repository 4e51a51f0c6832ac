"""The migrations are the only source of the schema: they must build exactly the tables
and indexes of `queuecore.sql.schema`, keep their own version table, run twice harmlessly,
and leave an application's own tables and alembic history in the same database alone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import queuecore
from queuecore.conformance.harness import Harness
from queuecore.conformance.helpers import capture_sql
from queuecore.migrate import VERSION_TABLE, head_revision, include_object, models
from queuecore.sql.schema import jobs, workers

DDL = ("CREATE", "ALTER", "DROP")


@pytest.fixture
def engine(harness: Harness, empty_dsn: str) -> Iterator[sa.Engine]:
    engine = harness.engine(empty_dsn)
    yield engine
    engine.dispose()


def drift(engine: sa.Engine, **opts: Any) -> list[Any]:
    """What alembic's autogenerate would change to make the database match the models."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, **opts})
        return compare_metadata(context, models(engine))


def schema(engine: sa.Engine) -> dict[str, Any]:
    """Every table with its columns, indexes and constraints, as the database reports them."""
    inspector = sa.inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted(index_text(i) for i in inspector.get_indexes(table)),
            inspector.get_unique_constraints(table),
            inspector.get_check_constraints(table),
        )
        for table in inspector.get_table_names()
    }


def index_text(index: dict[str, Any]) -> str:
    """An index as comparable text: SQLite reports a partial index's WHERE as a clause object."""
    options = {key: str(value) for key, value in index.get("dialect_options", {}).items()}
    return repr({**index, "dialect_options": options})


def versions(engine: sa.Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT version_num FROM {table}")).scalars().all()


def test_migrate_builds_the_models_without_drift(engine):
    assert queuecore.migrate(engine) == head_revision(engine)

    assert drift(engine, include_object=include_object) == []
    assert sorted(sa.inspect(engine).get_table_names()) == [VERSION_TABLE, jobs.name, workers.name]
    assert versions(engine, VERSION_TABLE) == [head_revision(engine)]

    with engine.begin() as conn:  # the comparison does see a difference when there is one
        # The dialect's own DROP INDEX (MariaDB's names the table).
        conn.execute(sa.schema.DropIndex(sa.Index("ix_queuecore_jobs_leases", jobs.c.visible_at)))
    assert [(op, index.name) for op, index in drift(engine, include_object=include_object)] == [
        ("add_index", "ix_queuecore_jobs_leases")
    ]


def test_a_new_database_is_migrated_in_one_transaction(engine):
    """Every revision, and the version table, commit together: a process that opens the
    database meanwhile sees no schema or all of it, never a revision in between to run
    again (alembic commits after each revision on SQLite unless told otherwise, and two
    processes racing on a new file then failed: 'expected to match one row when updating
    0002 to 0003')."""
    commits: list[None] = []
    sa.event.listen(engine, "commit", lambda conn: commits.append(None))

    assert queuecore.migrate(engine) == head_revision(engine)

    assert len(commits) == 1
    assert versions(engine, VERSION_TABLE) == [head_revision(engine)]


def test_migrate_twice_is_a_no_op(engine):
    queuecore.migrate(engine)
    before = schema(engine)

    with capture_sql() as sent:
        assert queuecore.migrate(engine) == head_revision(engine)

    assert [sql for sql, _ in sent if sql.lstrip().upper().startswith(DDL)] == []
    assert schema(engine) == before
    assert versions(engine, VERSION_TABLE) == [head_revision(engine)]


def test_migrate_leaves_the_applications_tables_and_alembic_history_alone(engine, empty_dsn):
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)")
        conn.exec_driver_sql("INSERT INTO orders (id, total) VALUES (1, 250)")
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES ('app_0042')")
    app_schema = schema(engine)

    queuecore.migrate(empty_dsn)

    after = schema(engine)
    assert {table: after[table] for table in app_schema} == app_schema
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, total FROM orders").all() == [(1, 250)]
        assert MigrationContext.configure(conn).get_current_revision() == "app_0042"
    assert versions(engine, VERSION_TABLE) == [head_revision(engine)]
    assert drift(engine, include_object=include_object) == []
    assert {op for op, *_ in drift(engine)} == {"remove_table"}  # unfiltered, it would drop them


#: A process that migrates `argv[1]` once the file `argv[2]` exists, and prints the revision.
MIGRATOR = """
import os, sys, time
import queuecore
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
print(queuecore.migrate(sys.argv[1]))
"""


def test_processes_migrating_one_new_database_at_once_take_turns(engine, empty_dsn, tmp_path):
    """Three processes, released together, migrate one new database: each succeeds, and
    the schema is built once (the migration lock: SQLite's write lock, PostgreSQL's
    advisory lock, MariaDB's GET_LOCK, where each DDL statement commits on its own)."""
    go = tmp_path / "go"
    migrators = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATOR, empty_dsn, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1.0)  # makes the race likely (each has imported queuecore); decides nothing
    go.touch()
    said = [migrator.communicate(timeout=120) for migrator in migrators]

    assert [migrator.returncode for migrator in migrators] == [0, 0, 0], [e for _, e in said]
    assert {out.strip() for out, _ in said} == {head_revision(engine)}, said
    assert versions(engine, VERSION_TABLE) == [head_revision(engine)]
    assert drift(engine, include_object=include_object) == []
