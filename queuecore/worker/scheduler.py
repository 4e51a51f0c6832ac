"""The worker's part in periodic jobs: a thread that looks at the registry's schedules
about once a second, or at the next tick, and enqueues the ticks that came due
(`queuecore.core.schedules` says which, and why no leader is needed)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from queuecore.core import validate
from queuecore.core.schedules import GRACE_SECONDS, Schedule
from queuecore.errors import DedupeConflict
from queuecore.job import EnqueueResult

log = logging.getLogger("queuecore.schedules")

#: The longest a worker goes without looking at its schedules.
LOOK_SECONDS = 1.0
#: The shortest pause between looks (a tick due at once is not looked at in a busy loop).
MIN_PAUSE = 0.01


class ScheduledQueue(Protocol):
    """What a schedule needs of a queue: its clock (R20) and a deduplicated enqueue."""

    def now(self) -> float: ...

    def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        queue: str = "default",
        run_at: datetime | float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
    ) -> EnqueueResult: ...


class Scheduler:
    """One worker's part in enqueuing the ticks of `schedules` on `queue`."""

    def __init__(
        self,
        queue: ScheduledQueue,
        schedules: Iterable[Schedule],
        *,
        grace: float = GRACE_SECONDS,
    ) -> None:
        self.queue = queue
        self.schedules = tuple(schedules)
        self.grace = validate.non_negative_seconds("grace", grace)
        self._since: dict[str, float] = {}  # the last tick handled, per schedule name

    def look(self) -> float | None:
        """Enqueue every tick due now; return the seconds until the next tick (None:
        no schedule has one). A schedule whose enqueue raised is looked at again next
        time, from where it was: the dedupe key makes a repeat harmless."""
        now = self.queue.now()
        for schedule in self.schedules:
            for tick in schedule.due(self._since.get(schedule.name), now, self.grace):
                self._enqueue(schedule, tick)
            latest = schedule.latest_at(now)
            if latest is not None:
                self._since[schedule.name] = latest
        upcoming = [t for t in (s.next_after(now) for s in self.schedules) if t is not None]
        return min(upcoming) - now if upcoming else None

    def _enqueue(self, schedule: Schedule, tick: float) -> None:
        try:
            result = self.queue.enqueue(
                schedule.kind,
                schedule.payload,
                queue=schedule.queue,
                run_at=tick,
                priority=schedule.priority,
                max_attempts=schedule.max_attempts,
                dedupe_key=schedule.dedupe_key(tick),
            )
        except DedupeConflict as conflict:
            # A schedule kept by its name through a deploy that changed its payload or
            # kind: this tick was enqueued by a worker still on the old code. It ran
            # once, as it should; the next tick has a key of its own.
            log.info(
                "%s was enqueued as job %d by a worker with another kind or payload: not again",
                schedule.dedupe_key(tick),
                conflict.existing_id,
            )
            return
        if result.created:
            log.info("%s enqueued as job %d", schedule.dedupe_key(tick), result.id)

    def run(self, stop: threading.Event) -> None:
        """Look until `stop` is set: at the next tick, and at least every LOOK_SECONDS.
        A failing look (the database is out of reach) is logged once until one works."""
        failing = False
        while not stop.is_set():
            try:
                wait = self.look()
            except Exception as exc:
                if not failing:
                    log.warning("cannot enqueue periodic jobs (%s); trying again", exc)
                failing, wait = True, LOOK_SECONDS
            else:
                if failing:
                    log.info("periodic jobs are enqueued again")
                failing = False
            stop.wait(min(LOOK_SECONDS, max(MIN_PAUSE, wait if wait is not None else 1.0)))


def scheduler_threads(
    queue: ScheduledQueue, handlers: Mapping[str, Callable[..., Any]], stop: threading.Event
) -> list[threading.Thread]:
    """The worker's hook: a thread that runs the registry's schedules until `stop`, or
    none when the registry has none (a plain dict has none)."""
    schedules = tuple(getattr(handlers, "schedules", ()))
    if not schedules:
        return []
    scheduler = Scheduler(queue, schedules)
    return [threading.Thread(target=scheduler.run, args=(stop,), name="queuecore-schedules")]
