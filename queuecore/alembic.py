"""Hooks for the application's own alembic `env.py`: its autogenerate leaves queuecore alone.

queuecore's tables live in the application's database but not in the application's
models, so `alembic revision --autogenerate` takes them for tables the application has
dropped and writes `op.drop_table("queuecore_jobs")`: applied, that deletes every job.
Given to the application's `context.configure(...)`, these two hooks hide them:

    import queuecore.alembic

    context.configure(
        ...,
        include_object=queuecore.alembic.include_object,
        include_name=queuecore.alembic.include_name,
    )

`include_name` keeps queuecore's tables from being reflected at all (so their indexes,
constraints and MariaDB's generated column are never read); `include_object` also drops
anything of queuecore's that reaches the comparison another way. Neither hides any
object of the application's own. Triggers, functions and storage settings (PostgreSQL's)
are not compared by alembic, so nothing is proposed for them either way.

queuecore's schema is upgraded by `queuecore migrate`, which keeps its own version table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Every table queuecore makes, its version table (`queuecore_alembic_version`) included,
#: is named with this prefix: an application's own tables must not be.
PREFIX = "queuecore_"


def is_queuecore_table(name: str | None) -> bool:
    """Whether the table called `name` is queuecore's (made by its migrations or its demo)."""
    return name is not None and name.startswith(PREFIX)


def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """alembic's `include_name`: False for queuecore's tables and everything on them."""
    if type_ == "table":
        return not is_queuecore_table(name)
    return not is_queuecore_table(parent_names.get("table_name"))


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """alembic's `include_object`: False for queuecore's tables and for the indexes,
    constraints and columns that belong to one."""
    if type_ == "table":
        return not is_queuecore_table(name)
    table = getattr(obj, "table", None)
    return not is_queuecore_table(getattr(table, "name", None))
