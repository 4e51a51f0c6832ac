"""Which handler runs which kind of job, and how a worker process finds that mapping
from a `MODULE:NAME` on its command line."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from queuecore.core import validate
from queuecore.core.schedules import Missed, Schedule
from queuecore.handling import Handler


class Registry(Mapping[str, Handler]):
    """A mapping of kind → handler filled by a decorator:

        jobs = Registry()

        @jobs.handler("email")
        def send_email(job): ...

    A plain dict serves a worker just as well; this only refuses a kind registered twice,
    which would otherwise silently run the wrong code, holds periodic schedules, and the
    kinds' time limits (W8: `@jobs.handler("report", timeout=300)`, in seconds).
    """

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self._schedules: dict[str, Schedule] = {}
        self._timeouts: dict[str, float] = {}
        for kind, fn in (handlers or {}).items():
            self.add(kind, fn)

    def add(self, kind: str, fn: Handler, *, timeout: float | None = None) -> None:
        """Register `fn` as the handler of jobs of `kind` (what `@registry.handler(kind)`
        does), with its own time limit in seconds if `timeout` is given. Raises ValueError
        when `kind` has a handler already or `timeout` is not positive, TypeError when `fn`
        is not callable."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind must be a non-empty string, got {kind!r}")
        if not callable(fn):
            raise TypeError(f"the handler for {kind!r} is not callable: {fn!r}")
        if kind in self._handlers:
            raise ValueError(f"kind {kind!r} already has a handler: {self._handlers[kind]!r}")
        if timeout is not None:
            self._timeouts[kind] = validate.positive_seconds("timeout", timeout)
        self._handlers[kind] = fn

    def handler(self, kind: str, *, timeout: float | None = None) -> Callable[[Handler], Handler]:
        """Decorator: register the function as the handler of `kind`; returns it unchanged.
        `timeout` (seconds) is its time limit, over the worker's `--timeout` (W8)."""

        def register(fn: Handler) -> Handler:
            self.add(kind, fn, timeout=timeout)
            return fn

        return register

    @property
    def timeouts(self) -> Mapping[str, float]:
        """The kinds that have a time limit of their own, in seconds (W8)."""
        return dict(self._timeouts)

    def periodic(
        self,
        cron: str,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        timezone: str = "UTC",
        missed: Missed = "latest",
        name: str | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
    ) -> Callable[[Handler], Handler]:
        """Enqueue a job of `kind` at every tick of `cron` (five fields, or six with
        seconds first) in `timezone`, from every worker that runs this registry, once per
        tick (`queuecore.core.schedules` says how, and what `missed` does after downtime).

        Returns a decorator that registers the handler of `kind`, for the common case:

            @jobs.periodic("0 3 * * *", "nightly-report")
            def nightly_report(job): ...
        """
        schedule = Schedule(
            cron=cron,
            kind=kind,
            payload={} if payload is None else payload,
            queue=queue,
            timezone=timezone,
            missed=missed,
            name=name or "",
            priority=priority,
            max_attempts=max_attempts,
        )
        if schedule.name in self._schedules:
            raise ValueError(
                f"a schedule named {schedule.name!r} exists already: "
                f"{self._schedules[schedule.name]!r}; give one of them another name="
            )
        self._schedules[schedule.name] = schedule
        return self.handler(kind)

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        """The periodic schedules, in the order they were added."""
        return tuple(self._schedules.values())

    def __getitem__(self, kind: str) -> Handler:
        return self._handlers[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    def __repr__(self) -> str:
        return f"Registry({sorted(self._handlers)})"


class RegistryNotFound(LookupError):
    """`MODULE:NAME` does not name a mapping of kind → handler; the message says why."""


def load_registry(spec: str) -> Mapping[str, Handler]:
    """Import `MODULE:NAME` and check it is a mapping of kind → callable.

    The current folder is importable, as it is for `python -m`, so a worker started
    beside the application's code finds it without PYTHONPATH.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise RegistryNotFound(
            f"{spec!r} is not MODULE:REGISTRY (e.g. myapp.jobs:REGISTRY, a dict or a "
            "queuecore.Registry of kind -> handler)"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(missing + "."):
            raise  # the module exists; something it imports is missing
        raise RegistryNotFound(
            f"cannot import {module_name!r} ({exc}); run the worker from the folder that "
            "holds it, or add that folder to PYTHONPATH"
        ) from exc
    try:
        handlers = getattr(module, attribute)
    except AttributeError:
        raise RegistryNotFound(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(handlers, Mapping):
        raise RegistryNotFound(
            f"{spec} is a {type(handlers).__name__}, not a mapping of kind -> handler "
            "(use a dict or a queuecore.Registry)"
        )
    not_callable = sorted(str(kind) for kind, fn in handlers.items() if not callable(fn))
    if not_callable:
        raise RegistryNotFound(f"{spec}: the handlers of {not_callable} are not callable")
    return handlers
