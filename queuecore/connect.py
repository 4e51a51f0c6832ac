"""Pick the backend from the DSN's dialect. Backends are found through entry points
(group `queuecore.backends`), so a third-party one plugs in the same way ours do."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from sqlalchemy import URL, Engine

from queuecore import options as option_set
from queuecore.dsn import to_url
from queuecore.errors import UnknownBackendError
from queuecore.protocol import Queue

ENTRY_POINT_GROUP = "queuecore.backends"

__all__ = ["ENTRY_POINT_GROUP", "backend_for", "connect", "to_url"]


def backend_for(url: URL) -> Any:
    """The backend class registered for the URL's dialect."""
    name = url.get_backend_name()
    found = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        known = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
        raise UnknownBackendError(
            f"no queuecore backend for the dialect {name!r}; installed backends: {known}"
        )
    return next(iter(found)).load()


def installed_backends() -> list[Any]:
    """Every backend that loads, so one's own options are known (and ignored) by the others."""
    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded.append(ep.load())
        except ImportError:  # a broken third-party backend must not break the others
            continue
    return loaded


def connect(bind: str | URL | Engine, **options: Any) -> Queue:
    """Open a queue. Every backend takes the same options (ADR 0009): lease_seconds,
    max_attempts, backoff_base, backoff_cap, clock, rng, max_payload_bytes,
    max_result_bytes; the pool's pool_size, max_overflow, pool_timeout, pool_recycle,
    pool_pre_ping, echo; and the backend-only synchronous, busy_timeout, sqlite_driver
    (SQLite) and notify (PostgreSQL), which the other backend ignores. An Engine passed in
    is used, never disposed."""
    url = to_url(bind)
    backend = backend_for(url)
    accepted = option_set.sort(backend, installed_backends(), bind, options)
    return backend(bind if isinstance(bind, Engine) else url, **accepted)
