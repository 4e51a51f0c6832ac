"""The one line a worker logs when it goes idle while ready jobs wait where it does not
look: in queues outside its `--queues`, or of kinds it has no handler for.

Such a worker looks healthy (it polls, it heartbeats) while the jobs it was meant to run
pile up, and the usual cause is a typo in `--queues` or a handler left out of the
registry. It is said once per set of names, and read once per idle stretch (one
`stats()` read, when the first claim of the stretch comes back empty), never per poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from queuecore.observe.worklog import describe, log


def unserved(
    stats: Mapping[str, Any], queues: Sequence[str] | None, kinds: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """The ready jobs a worker serving `queues` (None: all) and `kinds` will never claim:
    per queue it does not serve, and per kind it has no handler for."""
    other_queues = {
        name: entry["ready_now"]
        for name, entry in stats.get("queues", {}).items()
        if queues is not None and name not in queues and entry["ready_now"]
    }
    other_kinds = {
        name: entry["ready_now"]
        for name, entry in stats.get("kinds", {}).items()
        if name not in kinds and entry["ready_now"]
    }
    return other_queues, other_kinds


def said(other_queues: Mapping[str, int], other_kinds: Mapping[str, int]) -> str:
    """The warning's text, naming each queue and kind with its ready jobs."""

    def listed(found: Mapping[str, int]) -> str:
        return ", ".join(f"{name} ({count})" for name, count in sorted(found.items()))

    parts = []
    if other_queues:
        parts.append(f"in queues it does not serve: {listed(other_queues)}")
    if other_kinds:
        parts.append(f"of kinds it has no handler for: {listed(other_kinds)}")
    return (
        "idle, while ready jobs wait " + "; and ".join(parts) + " (check --queues and the registry)"
    )


class UnservedNotice:
    """Called by the claimer on each empty claim; reads the queue only on the first one
    of an idle stretch (`busy()` ends a stretch) and logs only a set of names it has
    not logged already."""

    def __init__(self, queues: Sequence[str] | None, kinds: Sequence[str]) -> None:
        self.queues = None if queues is None else list(queues)
        self.kinds = list(kinds)
        self.idle = False
        self.last: tuple[frozenset[str], frozenset[str]] | None = None

    def busy(self) -> None:
        self.idle = False

    def check(self, read: Callable[[], Mapping[str, Any]]) -> None:
        """`read`: the queue's `stats`, called only on the first empty claim of a stretch."""
        if self.idle:
            return
        self.idle = True
        try:
            stats = read()
        except Exception as exc:  # a hint only: never let it stop the worker
            log.debug("could not read the queue's stats for the idle check: %s", describe(exc))
            return
        self._say(stats)

    async def check_async(self, read: Callable[[], Awaitable[Mapping[str, Any]]]) -> None:
        """`check` for the asyncio worker, whose queue's `stats` is a coroutine."""
        if self.idle:
            return
        self.idle = True
        try:
            stats = await read()
        except Exception as exc:
            log.debug("could not read the queue's stats for the idle check: %s", describe(exc))
            return
        self._say(stats)

    def _say(self, stats: Mapping[str, Any]) -> None:
        found = unserved(stats, self.queues, self.kinds)
        names = (frozenset(found[0]), frozenset(found[1]))
        if any(names) and names != self.last:
            log.warning(said(*found))
        self.last = names
