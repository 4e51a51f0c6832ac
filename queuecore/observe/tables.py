"""Plain-text tables for people: the stats, the dead-letter list and the demo's verdict
print the same way in a terminal, a log or a CI transcript, with no extra dependency."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from queuecore.observe.terminal import printable


def render(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Numbers right-aligned so their digits line up, everything else left-aligned; a
    control character in a cell (a kind, a queue, an error) is printed as an escape."""
    values = [list(row) for row in rows]
    cells = [[_text(v) for v in row] for row in values]
    numeric = [
        bool(values) and all(_is_number(row[i]) for row in values) for i in range(len(headers))
    ]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(texts: Sequence[str]) -> str:
        return "  ".join(
            t.rjust(w) if num else t.ljust(w)
            for t, w, num in zip(texts, widths, numeric, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in cells)])


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "" if value is None else printable(str(value))
