"""R32's attempt history as SQL: the `errors` column's JSON array, one entry per failed
attempt (`attempt`, `at` in epoch seconds, `error`), oldest first, the last `KEPT` kept.

The entry is appended by the very statement that records the failure (`fail`, and the
writes of R08's dead state), so the history costs no extra round trip on the hot path.
The JSON functions differ by database; the construct below is compiled for each.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from queuecore.sql.schema import JSON_TYPE

#: How many failed attempts a job keeps (the newest).
KEPT = 20


class AppendedError(FunctionElement[Any]):
    """`errors` with one more entry, the oldest dropped when `KEPT` are there already."""

    name = "queuecore_appended_error"
    inherit_cache = True
    type = JSON_TYPE


def appended_error(
    errors: ColumnElement[Any],
    attempt: ColumnElement[Any],
    at: ColumnElement[Any],
    error: ColumnElement[Any],
) -> AppendedError:
    return AppendedError(errors, attempt, at, error)


def _parts(element: AppendedError, compiler: Any, **kw: Any) -> list[str]:
    return [compiler.process(clause, **kw) for clause in element.clauses]


def _json_path_sql(
    element: AppendedError, compiler: Any, kw: Any, empty: str, names: tuple[str, ...]
) -> str:
    """SQLite's and MariaDB's form (JSON text and paths): `names` are the functions that
    give an array's length, remove its first entry, make an object, append at a path,
    and that path."""
    length, remove, make, append, path = names
    errors, attempt, at, error = _parts(element, compiler, **kw)
    have = f"COALESCE({errors}, {empty})"
    room = f"CASE WHEN {length}({have}) >= {KEPT} THEN {remove}({have}, '$[0]') ELSE {have} END"
    entry = f"{make}('attempt', {attempt}, 'at', {at}, 'error', {error})"
    return f"{append}({room}, '{path}', {entry})"


@compiles(AppendedError, "sqlite")
def _sqlite(element: AppendedError, compiler: Any, **kw: Any) -> str:
    names = ("json_array_length", "json_remove", "json_object", "json_insert", "$[#]")
    return _json_path_sql(element, compiler, kw, "'[]'", names)


@compiles(AppendedError, "postgresql")
def _postgresql(element: AppendedError, compiler: Any, **kw: Any) -> str:
    errors, attempt, at, error = _parts(element, compiler, **kw)
    have = f"COALESCE({errors}, '[]'::jsonb)"
    room = f"CASE WHEN jsonb_array_length({have}) >= {KEPT} THEN {have} - 0 ELSE {have} END"
    # Typed: PostgreSQL cannot infer a parameter's type inside jsonb_build_object.
    at, error = f"CAST({at} AS DOUBLE PRECISION)", f"CAST({error} AS TEXT)"
    entry = f"jsonb_build_object('attempt', {attempt}, 'at', {at}, 'error', {error})"
    return f"({room}) || jsonb_build_array({entry})"


@compiles(AppendedError, "mariadb")
@compiles(AppendedError, "mysql")
def _mariadb(element: AppendedError, compiler: Any, **kw: Any) -> str:
    names = ("JSON_LENGTH", "JSON_REMOVE", "JSON_OBJECT", "JSON_ARRAY_APPEND", "$")
    return _json_path_sql(element, compiler, kw, "JSON_ARRAY()", names)
