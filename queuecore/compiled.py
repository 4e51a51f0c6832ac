"""Statements compiled once per dialect and run on the DBAPI connection.

SQLAlchemy still defines every statement; what this skips is its per-execution work
(cache-key generation, parameter processing, result-object construction), which on the
claim/complete hot path costs as much as SQLite itself (SPEC: known traps). Bind and
result processing of the column types is kept: it is looked up here once, not per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

Processor = Callable[[Any], Any] | None


class Compiled:
    """One statement as the driver sees it: SQL text, how to lay out its parameters, and
    how to turn the driver's rows into Python values."""

    __slots__ = (
        "_columns",
        "_defaults",
        "_dialect",
        "_names",
        "_positional",
        "_processors",
        "_results",
        "sql",
    )

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        if "POSTCOMPILE" in compiled.string:
            raise ValueError("expanding parameters cannot be compiled once; bind each value")
        self.sql: str = compiled.string
        names = {bind: name for bind, name in compiled.bind_names.items()}
        self._positional = compiled.positiontup is not None
        self._names: tuple[str, ...] = (
            tuple(compiled.positiontup)
            if compiled.positiontup is not None
            else tuple(dict.fromkeys(names.values()))
        )
        by_name = {name: bind for bind, name in names.items()}
        # Constants SQLAlchemy chose to bind (e.g. `attempts + 1`, NULL) keep their value.
        self._defaults = {
            name: bind.value
            for name, bind in by_name.items()
            if not bind.required and bind.callable is None
        }
        self._processors = {
            name: processor
            for name, bind in by_name.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        self._dialect = dialect
        self._columns = tuple(getattr(statement, "exported_columns", ()))
        self._results: tuple[Processor, ...] | None = None

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        """The driver's parameters: a tuple for positional paramstyles, else a dict."""
        merged = {**self._defaults, **values} if self._defaults else values
        if self._processors:
            merged = {
                name: (p(merged[name]) if (p := self._processors.get(name)) else merged[name])
                for name in self._names
            }
        if self._positional:
            return tuple(merged[name] for name in self._names)
        return {name: merged[name] for name in self._names}

    def rows(
        self, raw: Sequence[Sequence[Any]], type_codes: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        """The driver's rows with each column's type applied (e.g. JSON text → dict).
        Some processors depend on the driver's type code of the column, so they are
        chosen at the first result, from its description."""
        processors = self._results
        if processors is None:
            dialect = self._dialect
            processors = self._results = tuple(
                column.type.dialect_impl(dialect).result_processor(dialect, code)
                for column, code in zip(self._columns, type_codes, strict=True)
            )
        if not any(processors):
            return [tuple(row) for row in raw]
        return [
            tuple(
                value if p is None else p(value) for p, value in zip(processors, row, strict=True)
            )
            for row in raw
        ]
