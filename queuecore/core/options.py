"""The one set of options `connect()` takes whatever the DSN (ADR 0009).

Three kinds: the queue's own options (every backend, `QueueOptions`), the pool options of
the engine `connect()` makes (every backend), and backend-only options, which a backend
declares in a dataclass of its own (`BackendClass.backend_options`) and every other backend
accepts and ignores, so configuration never branches on the DSN. Each option is declared
once, with its default, in one of those dataclasses. A name none of them knows is a
TypeError, raised before anything connects.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy import Engine

if TYPE_CHECKING:
    from queuecore.contract import BackendClass

T = TypeVar("T")

#: The queue's clock: epoch seconds.
Clock = Callable[[], float]

#: The metadata key of a backend option that says how the engine is made.
SHAPES_ENGINE = "queuecore_shapes_engine"


@dataclass(frozen=True)
class QueueOptions:
    """The queue's own options, the same on every backend: `lease_seconds` (how long a
    claim holds a job before another worker may take it), `max_attempts` (a job's
    attempts before it is dead, unless its enqueue says otherwise), `backoff_base` and
    `backoff_cap` (the full-jitter backoff between attempts, in seconds), `clock` and
    `rng` (for tests: the queue's clock in epoch seconds, and the backoff's jitter),
    `max_payload_bytes` and `max_result_bytes` (the largest payload and result taken)."""

    lease_seconds: float = 30.0
    max_attempts: int = 5
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    clock: Clock | None = None
    rng: Callable[[], float] | None = None
    max_payload_bytes: int = 1 << 20
    max_result_bytes: int = 1 << 20


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that has none of its own."""


def engine_option(default: T) -> T:
    """A backend option that says how the engine is made (a field of its dataclass):
    refused beside a caller's own Engine, which is already made."""
    made: T = field(default=default, metadata={SHAPES_ENGINE: True})
    return made


def declared(options: type) -> frozenset[str]:
    """The option names an options dataclass declares."""
    return frozenset(f.name for f in fields(options))


def shaping_engine(options: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(options) if f.metadata.get(SHAPES_ENGINE))


#: Engine options both backends take with the same meaning (SQLAlchemy's pool settings).
POOL_OPTIONS = frozenset(
    {"pool_size", "max_overflow", "pool_timeout", "pool_recycle", "pool_pre_ping", "echo"}
)


def backend_only(backend: BackendClass) -> frozenset[str]:
    return declared(backend.backend_options)


def engine_building(backend: BackendClass) -> frozenset[str]:
    """Options that say how to make the engine: meaningless when the caller hands one in."""
    return POOL_OPTIONS | shaping_engine(backend.backend_options)


def sort(
    backend: BackendClass,
    others: Iterable[BackendClass],
    bind: object,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """The options this backend acts on. Another backend's own options are dropped; an
    unknown name, or an engine-building option beside a caller's Engine, is a TypeError."""
    here = declared(QueueOptions) | backend_only(backend) | POOL_OPTIONS
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


class Split(NamedTuple):
    """Options `sort` accepted, by who acts on them."""

    queue: QueueOptions
    backend: Any  # the backend's own options dataclass
    pool: dict[str, Any]


def split(backend: BackendClass, options: Mapping[str, Any]) -> Split:
    """Options `sort` accepted for `backend`, by who acts on them; the defaults fill in."""
    own, queue_names = backend_only(backend), declared(QueueOptions)
    return Split(
        QueueOptions(**{name: v for name, v in options.items() if name in queue_names}),
        backend.backend_options(**{name: v for name, v in options.items() if name in own}),
        {name: v for name, v in options.items() if name not in own and name not in queue_names},
    )


def for_engine(
    backend: BackendClass, others: Iterable[BackendClass], options: Mapping[str, Any]
) -> Split:
    """The options sorted as `connect()` sorts them, for `migrate`, which makes an engine
    and no queue (the queue's own are checked all the same)."""
    return split(backend, sort(backend, others, None, options))
