"""Which ticks a look enqueues: pure computations, no database."""

from __future__ import annotations

from datetime import datetime

import pytest

import queuecore
from queuecore.core.schedules import GRACE_SECONDS, Schedule


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def local(schedule: Schedule, tick: float) -> str:
    return datetime.fromtimestamp(tick, schedule.zone).strftime("%Y-%m-%d %H:%M:%S%z")


def ticks_between(schedule: Schedule, start: float, end: float) -> list[float]:
    found, tick = [], schedule.next_after(start)
    while tick is not None and tick <= end:
        found.append(tick)
        tick = schedule.next_after(tick)
    return found


def test_seconds_field_ticks_every_second() -> None:
    schedule = Schedule("* * * * * *", "tick")
    start = epoch("2026-12-01T10:00:00.250+00:00")
    assert schedule.next_after(start) == epoch("2026-12-01T10:00:01+00:00")
    assert schedule.latest_at(start) == epoch("2026-12-01T10:00:00+00:00")
    assert schedule.latest_at(epoch("2026-12-01T10:00:00+00:00")) == epoch(
        "2026-12-01T10:00:00+00:00"
    )


def test_first_look_enqueues_only_the_latest_tick() -> None:
    schedule = Schedule("* * * * * *", "tick")
    now = epoch("2026-12-01T10:00:00.5+00:00")
    assert schedule.due(None, now) == [epoch("2026-12-01T10:00:00+00:00")]


def test_a_late_look_enqueues_every_tick_within_the_grace() -> None:
    schedule = Schedule("* * * * * *", "tick")
    since = epoch("2026-12-01T10:00:00+00:00")
    assert schedule.due(since, since + 0.9) == []
    assert schedule.due(since, since + 4.2) == [since + 1, since + 2, since + 3, since + 4]


@pytest.mark.parametrize(("missed", "expected_extra"), [("latest", 1), ("skip", 0)])
def test_ticks_older_than_the_grace_collapse_to_one_or_none(
    missed: str, expected_extra: int
) -> None:
    schedule = Schedule("* * * * * *", "tick", missed=missed)
    since = epoch("2026-12-01T10:00:00+00:00")
    now = since + 100.5
    due = schedule.due(since, now)
    fresh = [t for t in due if now - t < GRACE_SECONDS]
    assert fresh == [since + 91 + i for i in range(10)]  # on time: every one of them
    assert len(due) == len(fresh) + expected_extra
    if expected_extra:
        assert due[0] == since + 90  # the latest of the 90 missed ticks, once


@pytest.mark.parametrize(("missed", "expected"), [("latest", 1), ("skip", 0)])
def test_a_worker_starting_after_downtime_runs_a_missed_tick_once_or_never(
    missed: str, expected: int
) -> None:
    schedule = Schedule("*/5 * * * *", "report", missed=missed)
    now = epoch("2026-12-01T10:07:00+00:00")  # 10:05 is 2 min late: missed
    due = schedule.due(None, now)
    assert len(due) == expected
    assert due == [epoch("2026-12-01T10:05:00+00:00")][:expected]


def test_a_dedupe_key_names_the_schedule_and_the_tick_in_utc() -> None:
    schedule = Schedule("30 2 * * *", "report", timezone="Europe/Berlin", name="nightly")
    tick = epoch("2026-06-01T02:30:00+02:00")
    assert schedule.dedupe_key(tick) == "periodic:nightly:2026-06-01T00:30:00Z"


def test_the_default_name_changes_with_the_schedule() -> None:
    names = {
        Schedule("* * * * *", "a").name,
        Schedule("*/2 * * * *", "a").name,
        Schedule("* * * * *", "a", {"x": 1}).name,
        Schedule("* * * * *", "a", queue="other").name,
        Schedule("* * * * *", "a", timezone="Europe/Berlin").name,
    }
    assert len(names) == 5
    assert Schedule("* * * * *", "a").name == Schedule("* * * * *", "a").name


# --- daylight-saving time, as documented: Debian cron's rules, through cronsim -------------


def test_dst_spring_forward_a_fixed_time_in_the_gap_runs_once_at_the_gap_end() -> None:
    schedule = Schedule("30 2 * * *", "report", timezone="Europe/Berlin")
    ticks = ticks_between(schedule, epoch("2026-03-27T12:00:00+00:00"), epoch("2026-03-31T00:00Z"))
    assert [local(schedule, t) for t in ticks] == [
        "2026-03-28 02:30:00+0100",
        "2026-03-29 03:00:00+0200",  # 02:30 does not exist that night
        "2026-03-30 02:30:00+0200",
    ]


def test_dst_fall_back_a_fixed_time_in_the_repeated_hour_runs_once() -> None:
    schedule = Schedule("30 2 * * *", "report", timezone="Europe/Berlin")
    ticks = ticks_between(schedule, epoch("2026-10-24T12:00:00+00:00"), epoch("2026-10-27T00:00Z"))
    assert [local(schedule, t) for t in ticks] == [
        "2026-10-25 02:30:00+0200",  # the first 02:30 only
        "2026-10-26 02:30:00+0100",
    ]
    # A worker that starts during the repeated hour sees that tick as the latest.
    assert schedule.latest_at(epoch("2026-10-25T02:40:00+01:00")) == ticks[0]


def test_dst_an_interval_schedule_follows_real_time_through_both_changes() -> None:
    schedule = Schedule("*/30 * * * *", "report", timezone="Europe/Berlin")
    back = ticks_between(schedule, epoch("2026-10-24T23:50:00+00:00"), epoch("2026-10-25T02:00Z"))
    assert [t - back[0] for t in back] == [i * 1800.0 for i in range(len(back))]
    assert len(back) == 5  # 02:00 and 02:30 happen twice, and so do their ticks
    forward = ticks_between(
        schedule, epoch("2026-03-29T00:10:00+00:00"), epoch("2026-03-29T02:00Z")
    )
    assert [local(schedule, t) for t in forward] == [
        "2026-03-29 01:30:00+0100",
        "2026-03-29 03:00:00+0200",
        "2026-03-29 03:30:00+0200",
        "2026-03-29 04:00:00+0200",
    ]


# --- bad schedules fail where they are written --------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "* * *"}, "not a cron expression"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"missed": "all"}, "missed"),
        ({"kind": ""}, "kind"),
        ({"queue": ""}, "queue"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"priority": 2**40}, "priority"),
    ],
)
def test_a_bad_schedule_is_refused_at_once(options: dict[str, object], message: str) -> None:
    registry = queuecore.Registry()
    arguments = {"cron": "* * * * *", "kind": "tick", **options}
    with pytest.raises(ValueError, match=message):
        registry.periodic(arguments.pop("cron"), arguments.pop("kind"), **arguments)
    assert registry.schedules == ()


def test_a_payload_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(TypeError):
        queuecore.Registry().periodic("* * * * *", "tick", ["not", "an", "object"])  # type: ignore[arg-type]


def test_two_schedules_with_one_name_are_refused() -> None:
    registry = queuecore.Registry()
    registry.periodic("* * * * *", "a", name="same")
    with pytest.raises(ValueError, match="same"):
        registry.periodic("*/2 * * * *", "b", name="same")


def test_the_decorator_form_registers_the_handler_too() -> None:
    registry = queuecore.Registry()

    @registry.periodic("0 3 * * *", "nightly")
    def nightly(job: queuecore.Job) -> None: ...

    assert registry["nightly"] is nightly
    assert [s.kind for s in registry.schedules] == ["nightly"]
    assert registry.schedules[0].payload == {}
