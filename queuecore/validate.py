"""Checks on caller input, run before anything is written (R22)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any


def kind(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"kind must be a non-empty string, got {value!r}")
    return value


def queue_name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"queue must be a non-empty string, got {value!r}")
    return value


def payload(value: object, *, max_bytes: int) -> dict[str, Any]:
    """A payload is a JSON object; it is serialised here so a bad one fails before the write."""
    if not isinstance(value, Mapping):
        raise TypeError(f"payload must be a JSON object (a dict), got {type(value).__name__}")
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"payload is not JSON-serialisable: {exc}") from exc
    if len(encoded.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ValueError(f"payload is larger than max_payload_bytes={max_bytes}")
    return dict(value)


def at_least(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def positive_seconds(name: str, value: object) -> float:
    if not _is_real(value) or not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def non_negative_seconds(name: str, value: object) -> float:
    if not _is_real(value) or not value >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def epoch(name: str, value: object) -> float:
    """`run_at` may be an aware datetime, a naive one meaning UTC, or epoch seconds."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if not _is_real(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a datetime or epoch seconds, got {value!r}")
    return float(value)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
