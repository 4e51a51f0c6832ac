"""R36: `queuecore migrate --check` for deploy scripts: exit 0 at head; one revision behind
(or never migrated, on a chain of one revision), exit 1 with one line naming the pending
revision and the command to run, having written nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queuecore.cli.main import main
from queuecore.conformance.harness import Harness
from queuecore.migrate import (
    HEADS,
    VERSION_TABLE,
    current_revision,
    head_revision,
    migration_chain,
    scripts,
)
from tests.upgrades.revisions import one_revision_behind


def test_r36_migrate_check_exits_1_one_revision_behind_and_0_at_head(
    harness: Harness, empty_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = harness.engine(empty_dsn)
    try:
        behind = one_revision_behind(engine)
        head = head_revision(engine)

        assert main(["migrate", "--check", "--dsn", empty_dsn]) == 1
        said = capsys.readouterr()
        assert said.out == ""
        [line] = said.err.splitlines()
        assert f"pending: {head})" in line and "Run: queuecore migrate --dsn" in line, line
        assert current_revision(engine) == behind  # nothing written, not even the table
        assert behind is not None or not sa.inspect(engine).has_table(VERSION_TABLE)

        assert main(["migrate", "--dsn", empty_dsn]) == 0
        capsys.readouterr()
        assert main(["migrate", "--check", "--dsn", empty_dsn]) == 0
        assert f"revision {head}" in capsys.readouterr().out
    finally:
        engine.dispose()


def test_the_heads_a_connect_compares_with_are_alembics(harness: Harness, empty_dsn: str) -> None:
    """`migrate.HEADS` (what a connect checks without loading alembic) names the newest
    revision of each chain as alembic reads it from the files: a revision added without
    updating it fails here, on the backend whose chain it extends."""
    engine = harness.engine(empty_dsn)
    try:
        assert HEADS[migration_chain(engine)] == scripts(engine).get_current_head()
    finally:
        engine.dispose()
