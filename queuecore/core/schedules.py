"""Periodic jobs without a leader.

Every worker that runs a registry with schedules takes part: each looks at the queue's
clock (R20) about once a second, or at the next tick, and enqueues the ticks that came
due. They never talk to each other: each tick's job carries the dedupe key
`periodic:<schedule name>:<tick in UTC>`, so however many workers race for a tick, the
unique key lets one enqueue in (R02) and the others get the same job back. Nothing is
stored besides the jobs, so a schedule deleted from the code simply stops.

Which ticks a look enqueues (`Schedule.due`; the worker's looks are
`queuecore.worker.scheduler`) (a worker keeps, per schedule, the last tick it handled):
- every tick since that one that is at most `GRACE_SECONDS` late: a slow look loses none;
- of the ticks older than that (the workers were stopped, suspended, or cut off from the
  database), only the latest, once, with `missed="latest"` (the default); none with
  `missed="skip"`;
- a worker that starts knows nothing of the ticks before it: it considers only the
  schedule's latest tick, enqueued if it is on time or `missed="latest"`. When other
  workers were running, that tick's job exists already and the enqueue is a no-op.

The cron expressions are parsed by cronsim (the `periodic` extra): five fields, or six
with seconds first.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from queuecore.core import validate

#: How late a look may see a tick and still count it as on time.
GRACE_SECONDS = 10.0

Missed = Literal["latest", "skip"]
MISSED_CHOICES = ("latest", "skip")
KEY_PREFIX = "periodic"


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError as exc:  # an optional extra: the core needs no cron parser
        raise ImportError(
            "periodic jobs need the cron parser: pip install 'queuecore[periodic]'"
        ) from exc
    return cronsim


@dataclass(frozen=True)
class Schedule:
    """A job of `kind` with `payload`, enqueued at every tick of `cron` in `timezone`.

    `name` identifies the schedule in the ticks' dedupe keys. By default it is derived
    from everything else, so changing the cron, payload, queue or timezone makes a new
    schedule (whose latest tick counts as missed, see the module's docstring); pass a
    name to keep one schedule across such edits.
    """

    cron: str
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    queue: str = "default"
    timezone: str = "UTC"
    missed: Missed = "latest"
    name: str = ""
    priority: int = 0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        validate.kind(self.kind)
        validate.queue_name(self.queue)
        # Checked here as enqueue would: a bad value must not fail every look instead.
        validate.at_least("priority", self.priority, *validate.INT32)
        if self.max_attempts is not None:
            validate.at_least("max_attempts", self.max_attempts, 1, validate.INT32[1])
        payload = validate.payload(self.payload, max_bytes=1 << 20)
        object.__setattr__(self, "payload", payload)
        if self.missed not in MISSED_CHOICES:
            raise ValueError(f"missed must be one of {MISSED_CHOICES}, got {self.missed!r}")
        cronsim = _cronsim()
        try:  # an unknown timezone or a bad expression fails here, not at the first look
            cronsim.CronSim(self.cron, datetime.now(self.zone))
        except cronsim.CronSimError as exc:
            raise ValueError(f"cron {self.cron!r} is not a cron expression: {exc}") from None
        if not self.name:
            object.__setattr__(self, "name", self._derived_name())
        validate.text("name", self.name)

    def _derived_name(self) -> str:
        identity = [self.cron, self.kind, self.payload, self.queue, self.timezone]
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        return f"{self.kind}-{digest[:12]}"

    @property
    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"timezone {self.timezone!r} is unknown: {exc}") from None

    def next_after(self, epoch: float) -> float | None:
        """The first tick strictly after `epoch`, or None when there is none (in 50 years)."""
        start = datetime.fromtimestamp(math.floor(epoch), tz=self.zone)
        return self._first(start, reverse=False)

    def latest_at(self, epoch: float) -> float | None:
        """The last tick at or before `epoch`, or None when there is none (in 50 years)."""
        start = datetime.fromtimestamp(math.floor(epoch), tz=self.zone) + timedelta(seconds=1)
        return self._first(start, reverse=True)

    def _first(self, start: datetime, *, reverse: bool) -> float | None:
        try:
            tick: datetime = next(_cronsim().CronSim(self.cron, start, reverse=reverse))
            return tick.timestamp()
        except StopIteration:
            return None

    def dedupe_key(self, tick: float) -> str:
        """The key that makes each tick one job, whichever worker enqueues it."""
        when = datetime.fromtimestamp(tick, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{KEY_PREFIX}:{self.name}:{when}"

    def due(self, since: float | None, now: float, grace: float = GRACE_SECONDS) -> list[float]:
        """The ticks a look at `now` enqueues, oldest first, when the last tick this
        worker handled was `since` (None: its first look). The rules are the module's."""
        if since is None:
            latest = self.latest_at(now)
            if latest is None or (self.missed == "skip" and now - latest > grace):
                return []
            return [latest]
        first = self.next_after(since)
        if first is None or first > now:
            return []
        ticks: list[float] = []
        start = since
        if first <= now - grace:  # missed: nobody looked while they were on time
            if self.missed == "latest":
                ticks.append(self.latest_at(now - grace) or first)  # never None: first fits
            start = now - grace
        tick = self.next_after(start)
        while tick is not None and tick <= now:
            ticks.append(tick)
            tick = self.next_after(tick)
        return ticks
