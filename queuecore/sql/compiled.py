"""Statements compiled once per dialect and run on the DBAPI connection.

SQLAlchemy still defines every statement; what this skips is its per-execution work
(cache-key generation, parameter processing, result-object construction), which on the
claim/complete hot path costs as much as SQLite itself (SPEC: known traps). Bind and
result processing of the column types is kept: it is looked up here once, not per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None

#: Marks a parameter the caller must give (no constant value of its own).
REQUIRED = object()


class Compiled:
    """One statement as the driver sees it: SQL text, how to lay out its parameters, and
    how to turn the driver's rows into Python values."""

    __slots__ = ("_columns", "_converting", "_dialect", "_layout", "_names", "_positional", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        # A DML or SELECT construct compiles with the dialect's statement compiler, whose
        # parameter names and order are read below; `compile` is typed for DDL too.
        compiled = cast("SQLCompiler", statement.compile(dialect=dialect))
        if "POSTCOMPILE" in compiled.string:
            raise ValueError("expanding parameters cannot be compiled once; bind each value")
        self.sql: str = compiled.string
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        self._positional = compiled.positiontup is not None
        self._names: tuple[str, ...] = (
            tuple(compiled.positiontup) if compiled.positiontup is not None else tuple(by_name)
        )
        # Per parameter: a constant SQLAlchemy chose to bind (e.g. `attempts + 1`, NULL)
        # or REQUIRED, and the type's bind processor, if it has one.
        self._layout: tuple[tuple[str, Any, Processor], ...] = tuple(
            (
                name,
                REQUIRED
                if by_name[name].required or by_name[name].callable is not None
                else by_name[name].value,
                by_name[name].type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name in self._names
        )
        self._dialect = dialect
        self._columns = tuple(getattr(statement, "exported_columns", ()))
        # Per column that has one, (its place, its result processor): chosen at the first
        # result (see `rows`), and most columns of a row have none.
        self._converting: tuple[tuple[int, Callable[[Any], Any]], ...] | None = None

    def prefixed(self, prefix: str) -> Compiled:
        """This statement behind `prefix` (an EXPLAIN), with the same parameters; its
        rows come as the driver gives them."""
        other = object.__new__(Compiled)
        for slot in Compiled.__slots__:
            setattr(other, slot, getattr(self, slot))
        other.sql = f"{prefix} {self.sql}"
        other._columns = ()
        other._converting = ()
        return other

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        """The driver's parameters: a tuple for positional paramstyles, else a dict."""
        laid = []
        for name, constant, processor in self._layout:
            value = values[name] if constant is REQUIRED else values.get(name, constant)
            laid.append(value if processor is None else processor(value))
        if self._positional:
            return tuple(laid)
        return dict(zip(self._names, laid, strict=True))

    def rows(
        self, raw: Sequence[Sequence[Any]], type_codes: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        """The driver's rows with each column's type applied (e.g. JSON text → dict).
        Some processors depend on the driver's type code of the column, so they are
        chosen at the first result, from its description."""
        converting = self._converting
        if converting is None:
            dialect = self._dialect
            processors = (
                column.type.dialect_impl(dialect).result_processor(dialect, code)
                for column, code in zip(self._columns, type_codes, strict=True)
            )
            converting = self._converting = tuple(
                (i, p) for i, p in enumerate(processors) if p is not None
            )
        if not converting:
            return [tuple(row) for row in raw]
        converted = []
        for row in raw:
            values = list(row)
            for i, processor in converting:
                values[i] = processor(values[i])
            converted.append(tuple(values))
        return converted
