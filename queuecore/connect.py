"""Pick the backend from the DSN's dialect. Backends are found through entry points
(group `queuecore.backends`), so a third-party one plugs in the same way ours do."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from sqlalchemy import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from queuecore.errors import UnknownBackendError
from queuecore.protocol import Queue

ENTRY_POINT_GROUP = "queuecore.backends"


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


def to_url(bind: str | URL | Engine) -> URL:
    if isinstance(bind, Engine):
        return bind.url
    try:
        return make_url(bind)
    except ArgumentError as exc:
        raise ValueError(
            f"not a database URL: {bind!r} (try sqlite:///jobs.db or "
            "postgresql+psycopg://user@host/db)"
        ) from exc


def connect(bind: str | URL | Engine, **options: Any) -> Queue:
    """Open a queue. Options common to every backend: lease_seconds, max_attempts,
    backoff_base, backoff_cap, clock, rng, max_payload_bytes; SQLite also takes
    synchronous, busy_timeout and sqlite_driver."""
    url = to_url(bind)
    return backend_for(url)(bind, **options)
