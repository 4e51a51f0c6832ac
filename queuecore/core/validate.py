"""Checks on caller input, run before anything is written (R22)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypeGuard

# Integer columns are 32-bit (priority, max_attempts) and ids 64-bit on PostgreSQL.
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
# No duration the queue adds to the clock may push a time past what a datetime holds.
CENTURY = 100 * 365.25 * 86400
#: R29: the longest name (kind, queue, dedupe_key, worker) every backend holds, in
#: characters: MariaDB keeps them in VARCHAR(255) keys. One limit for all, so that a job
#: one backend took can be copied to any other.
NAME_CHARACTERS = 255
#: R29: the deepest JSON every backend holds, counted as MariaDB's JSON_DEPTH counts it
#: (a scalar, {} or [] is 1; each enclosing object or array adds 1): MariaDB refuses 32.
JSON_DEPTH = 31
# Control characters (C0, DEL, C1) but tab: a name is printed in logs and tables, where
# they would move the cursor or restyle the terminal of whoever reads them.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def text(name: str, value: object) -> str:
    """A name (R29): at most `NAME_CHARACTERS` long, no control character but tab, and
    text every database can hold (PostgreSQL cannot hold NUL, no driver can encode a lone
    surrogate), refused alike on every backend before anything is written."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > NAME_CHARACTERS:
        raise ValueError(
            f"{name} is {len(value)} characters long; every backend holds at most {NAME_CHARACTERS}"
        )
    control = _CONTROL.search(value)
    if control is not None:
        raise ValueError(
            f"{name} contains the control character U+{ord(control.group()):04X}; "
            "names may hold no control character but tab"
        )
    _storable(name, value)
    return value


def searchable(name: str, value: str | None) -> None:
    """A value to look a name up by (a filter, a dedupe key to find): any text the
    database can compare, past R29's limits too, as an older row may hold it; NUL and
    lone surrogates are refused, which no database can be sent."""
    if value is not None:
        _storable(name, value)


def kind(value: object) -> str:
    return text("kind", value)


def queue_name(value: object) -> str:
    return text("queue", value)


def optional_text(name: str, value: object) -> str | None:
    return None if value is None else text(name, value)


def job_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a job id is an integer, got {value!r}")
    return at_least("a job id", value, *INT64)


#: The longest error text kept per attempt: a traceback is cut to its last lines to fit.
ERROR_TEXT_LIMIT = 2000


def error_text(value: object, limit: int) -> str:
    """A failure report is never refused (that would leave its job running until the
    lease ends, its error lost): what no text column can hold is escaped instead."""
    escaped = str(value).replace("\x00", "\\x00")
    escaped = escaped.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped[:limit]


def _storable(name: str, value: str) -> None:
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character, which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text ({exc.reason})") from exc


def payload(value: object, *, max_bytes: int) -> dict[str, Any]:
    """A payload is a JSON object; it is serialised here so a bad one fails before the write.
    It comes back exactly as given, so keys must be strings (JSON would turn 1 into "1")."""
    if not isinstance(value, Mapping):
        raise TypeError(f"payload must be a JSON object (a dict), got {type(value).__name__}")
    _payload_strings(value)
    if _json_size("payload", value) > max_bytes:
        raise ValueError(f"payload is larger than max_payload_bytes={max_bytes}")
    return dict(value)


def result(value: object, *, max_bytes: int) -> object:
    """A job's result is any JSON value (R24), checked here so that a bad one fails while
    the job is still running under its lease, before anything is written. Keys must be
    strings, as in a payload (JSON would turn 1 into "1")."""
    _payload_strings(value, "result")
    size = _json_size("result", value)
    if size > max_bytes:
        raise ValueError(
            f"result is {size} bytes as JSON, larger than max_result_bytes={max_bytes}; "
            "store big outputs elsewhere and return where they are"
        )
    return value


def _json_size(name: str, value: object) -> int:
    """The value's size as stored: JSON's UTF-8 bytes. Not JSON (a set, NaN): TypeError."""
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} is not JSON-serialisable: {exc}") from exc
    return len(encoded.encode("utf-8", "surrogatepass"))


def _payload_strings(value: object, name: str = "payload") -> None:
    """Every string and key storable, and no deeper than `JSON_DEPTH` (R29). A walk with a
    list of its own, not recursion: a payload nested 100,000 deep is refused, not a
    RecursionError (and json.dumps, which recurses, never sees it)."""
    pending: list[tuple[str, object, int]] = [(name, value, 1)]
    while pending:
        path, item, depth = pending.pop()
        if depth > JSON_DEPTH:
            raise ValueError(
                f"{name} is nested more than {JSON_DEPTH} levels deep (JSON depth, as MariaDB "
                f"counts it), the most every backend holds; at {path[:200]}"
            )
        if isinstance(item, str):
            _storable(path, item)
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"{path} has a key that is not a string: {key!r}")
                _storable(f"a key of {path}", key)
                pending.append((f"{path}[{key!r}]", inner, depth + 1))
        elif isinstance(item, (list, tuple)):
            pending.extend((f"{path}[{i}]", inner, depth + 1) for i, inner in enumerate(item))


def at_least(name: str, value: object, minimum: int, maximum: int = INT64[1]) -> int:
    """`value` as an integer in [minimum, maximum]. The error names the bound in plain
    words: a reader of `--concurrency 0` has no use for 9223372036854775807."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(
            f"{name} must be an integer{_bound(value, minimum, maximum)}, got {value!r}"
        )
    return value


def _bound(value: object, minimum: int, maximum: int) -> str:
    """The bound `value` missed, said as a person would: a limit of the column's size is
    only named to someone who went past it."""
    huge = INT32[1]
    if isinstance(value, int) and not isinstance(value, bool):
        if value > maximum:
            return f" no greater than {maximum:,}"
        if value < minimum and minimum <= -huge:
            return f" no less than {minimum:,}"
    if maximum < huge:
        return f" from {minimum:,} to {maximum:,}"
    return "" if minimum <= -huge else f" of at least {minimum:,}"


def positive_seconds(name: str, value: object) -> float:
    if not _is_real(value) or not 0 < value <= CENTURY:
        raise ValueError(
            f"{name} must be a positive number of seconds (at most {CENTURY:.0f}), got {value!r}"
        )
    return float(value)


def non_negative_seconds(name: str, value: object) -> float:
    if not _is_real(value) or not 0 <= value <= CENTURY:
        raise ValueError(
            f"{name} must be a non-negative number of seconds (at most {CENTURY:.0f}), "
            f"got {value!r}"
        )
    return float(value)


def epoch(name: str, value: object) -> float:
    """`run_at` may be an aware datetime, a naive one meaning UTC, or epoch seconds."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if not _is_real(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a datetime or epoch seconds, got {value!r}")
    try:
        datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"{name} is outside the dates a datetime can hold: {value!r}") from exc
    return float(value)


def _is_real(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
