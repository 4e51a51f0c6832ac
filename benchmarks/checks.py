"""Targets checked on a run's medians, what they make of the exit status, and how a
figure is shown."""

from __future__ import annotations

from typing import Any

Check = dict[str, Any]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(value: float | None, spec: str = ",.0f") -> str:
    """A figure for a table, or a dash where nothing was measured."""
    return "—" if value is None else format(value, spec)


def check(
    checks: list[Check], name: str, value: float | None, bound: float, *, at_most: bool = False
) -> None:
    """Record one target. A value that could not be measured (a peer not installed, a
    row filtered out) is not held: a run that did not show a target met has missed it."""
    held = value is not None and (value <= bound if at_most else value >= bound)
    checks.append({"target": name, "value": value, "bound": bound, "held": held})


def exit_status(checks: list[Check]) -> int:
    """Non-zero when any target was missed, so a script or CI job can act on it."""
    return 0 if all(c["held"] for c in checks) else 1
