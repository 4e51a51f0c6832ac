"""The one set of options `connect()` takes whatever the DSN (ADR 0009).

Three kinds: the queue's own options (every backend), the pool options of the engine
`connect()` makes (every backend), and backend-only options, which a backend declares and
every other backend accepts and ignores, so configuration never branches on the DSN.
A name none of them knows is a TypeError, raised before anything connects.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

if TYPE_CHECKING:
    from queuecore.contract import BackendClass


#: Engine options both backends take with the same meaning (SQLAlchemy's pool settings).
POOL_OPTIONS = frozenset(
    {"pool_size", "max_overflow", "pool_timeout", "pool_recycle", "pool_pre_ping", "echo"}
)


def queue_options(backend: BackendClass) -> frozenset[str]:
    """The queue's own options: the keyword-only parameters of the backend's base class,
    read from its signature so that a new option is accepted where it is defined."""
    names: set[str] = set()
    for klass in backend.__mro__ if isinstance(backend, type) else ():
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    return frozenset(names)


def backend_only(backend: BackendClass) -> frozenset[str]:
    return backend.backend_options


def engine_building(backend: BackendClass) -> frozenset[str]:
    """Options that say how to make the engine: meaningless when the caller hands one in."""
    return POOL_OPTIONS | backend.engine_options


def sort(
    backend: BackendClass,
    others: Iterable[BackendClass],
    bind: object,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """The options this backend acts on. Another backend's own options are dropped; an
    unknown name, or an engine-building option beside a caller's Engine, is a TypeError."""
    here = queue_options(backend) | backend_only(backend) | POOL_OPTIONS
    elsewhere = frozenset().union(*(backend_only(other) for other in others)) - here
    for name in options:
        if name not in here and name not in elsewhere:
            raise TypeError(unknown(name, here | elsewhere))
    if isinstance(bind, Engine):
        building = sorted(engine_building(backend) & options.keys())
        if building:
            raise TypeError(
                f"connect() got an Engine and {', '.join(map(repr, building))}, which "
                "configure the engine connect() makes from a DSN: set them on your own "
                "create_engine() instead"
            )
    return {name: value for name, value in options.items() if name in here}


def unknown(name: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"connect() got an unknown option {name!r}{hint} (it takes: {', '.join(known)})"


def for_engine(
    backend: BackendClass, others: Iterable[BackendClass], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The options that shape the engine alone (for `migrate`, which makes no queue)."""
    accepted = sort(backend, others, None, options)
    params = inspect.signature(backend.create_engine).parameters.values()
    shaping = POOL_OPTIONS | {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    return {name: value for name, value in accepted.items() if name in shaping}
