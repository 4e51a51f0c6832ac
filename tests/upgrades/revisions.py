"""Databases one revision behind queuecore's head, on whichever chain the backend has."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from queuecore.migrate import alembic_config, head_revision


def previous_revision(engine: sa.Engine) -> str | None:
    """The revision before head on `engine`'s chain; None when head is its first (then
    one revision behind is a database never migrated)."""
    script = ScriptDirectory.from_config(alembic_config(engine))
    down = script.get_revision(head_revision(engine)).down_revision
    assert down is None or isinstance(down, str), f"a merge revision: {down}"
    return down


def one_revision_behind(engine: sa.Engine) -> str | None:
    """Upgrade the unmigrated database of `engine` to the revision before head (leave it
    unmigrated when there is none); returns that revision."""
    previous = previous_revision(engine)
    if previous is not None:
        command.upgrade(alembic_config(engine), previous)
    return previous
