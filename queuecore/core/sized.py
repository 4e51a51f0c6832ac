"""Statements that take a list of values bind them one parameter each, compiled once per
size: a list bound as one expanding parameter is compiled again on every call, which
on the hot path costs more than the statement. So that a few compiled statements serve
every length, a list is bound at the next power of two, padded with its last value
(which an `IN`, a `NOT IN` or a list of fences reads the same)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def bucket(count: int) -> int:
    """The size a list of `count` values is bound at: the next power of two."""
    size = 1
    while size < count:
        size *= 2
    return size


def padded(values: Sequence[T], size: int) -> list[T]:
    """`values` made `size` long with copies of its last one."""
    return [*values, *[values[-1]] * (size - len(values))]


def listed(name: str, values: Sequence[T], size: int) -> dict[str, T]:
    """`values` as the parameters `name_0` … `name_{size-1}`, padded with the last one."""
    return {f"{name}_{i}": value for i, value in enumerate(padded(values, size))}


def listed_as_rows(name: str, values: Sequence[T], size: int) -> dict[str, T | None]:
    """`values` as `listed` has them, padded with NULLs instead: for a list read as rows
    (joined), where a copy of the last value would be a row twice, and NULL joins none."""
    rows: list[T | None] = [*values, *[None] * (size - len(values))]
    return {f"{name}_{i}": value for i, value in enumerate(rows)}
