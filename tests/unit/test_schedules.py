"""When schedules are due: cron in a time zone across both DST transitions, intervals, misfires."""

from __future__ import annotations

import datetime as dt
import itertools
import zoneinfo

import pytest

from django_jobs import job
from django_jobs.registry import registry
from django_jobs.schedules import InvalidSchedule, Schedule, from_entry

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
UTC = dt.UTC


def local(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=BERLIN)  # type: ignore[misc]


def in_berlin(schedule: Schedule, after: dt.datetime, count: int) -> list[str]:
    ticks = schedule.ticks(after)
    return [next(ticks).astimezone(BERLIN).isoformat() for _ in range(count)]


def test_nightly_cron_fires_at_local_time_in_its_zone() -> None:
    nightly = Schedule(name="n", type="t", cron="0 3 * * *", tz="Europe/Moscow")
    tick = nightly.next_after(dt.datetime(2026, 6, 1, 12, tzinfo=UTC))
    assert tick == dt.datetime(2026, 6, 2, 0, tzinfo=UTC)  # 03:00 in Moscow (UTC+3)


def test_tick_in_spring_gap_fires_at_the_first_instant_after_the_gap() -> None:
    # 2026-03-29: Berlin's clocks jump from 02:00 to 03:00; 02:30 does not exist that day.
    daily = Schedule(name="n", type="t", cron="30 2 * * *", tz="Europe/Berlin")
    assert in_berlin(daily, local(2026, 3, 28, 12), 3) == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_fixed_time_tick_in_autumn_overlap_fires_once() -> None:
    # 2026-10-25: Berlin's 02:00-03:00 happens twice; a job at 02:30 runs at the first one only.
    daily = Schedule(name="n", type="t", cron="30 2 * * *", tz="Europe/Berlin")
    assert in_berlin(daily, local(2026, 10, 24, 12), 2) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_repeating_tick_fires_on_both_passes_through_the_overlap() -> None:
    half_hourly = Schedule(name="n", type="t", cron="*/30 * * * *", tz="Europe/Berlin")
    ticks = [t for t, _ in zip(half_hourly.ticks(local(2026, 10, 25, 1, 50)), range(5), strict=False)]
    assert [t.astimezone(BERLIN).isoformat() for t in ticks] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    # In UTC the ticks are evenly spaced: no half hour is doubled or lost.
    assert {(b - a) for a, b in itertools.pairwise(ticks)} == {dt.timedelta(minutes=30)}


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    every = Schedule(name="n", type="t", every=2)
    moment = dt.datetime(2026, 1, 1, 0, 0, 3, 500_000, tzinfo=UTC)
    assert every.next_after(moment) == dt.datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)
    assert every.next_after(every.next_after(moment)) == dt.datetime(2026, 1, 1, 0, 0, 6, tzinfo=UTC)


def test_missed_ticks_coalesce_into_the_latest() -> None:
    every = Schedule(name="n", type="t", every=2)
    last = dt.datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    latest, count = every.latest_due(last, last + dt.timedelta(seconds=9))
    assert (latest, count) == (last + dt.timedelta(seconds=8), 4)
    hourly = Schedule(name="h", type="t", cron="0 * * * *")
    latest, count = hourly.latest_due(last, last + dt.timedelta(hours=5, minutes=10))
    assert (latest, count) == (last + dt.timedelta(hours=5), 5)
    assert hourly.latest_due(last, last + dt.timedelta(minutes=59)) == (None, 0)


def test_a_long_outage_of_a_minutely_schedule_still_finds_the_latest_tick() -> None:
    minutely = Schedule(name="m", type="t", cron="* * * * *")
    last = dt.datetime(2026, 1, 1, tzinfo=UTC)
    latest, count = minutely.latest_due(last, last + dt.timedelta(days=30, seconds=30))
    assert latest == last + dt.timedelta(days=30)
    assert count >= 10_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression"),
        ({"cron": "0 3 * *"}, "bad cron expression"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 0.5}, "at least 1 second"),
        ({}, "either a cron expression or an interval"),
        ({"cron": "0 3 * * *", "every": 60}, "either a cron expression or an interval"),
        ({"every": 60, "misfire_grace": -1}, "misfire_grace"),
        ({"every": 60, "on_running": "queue"}, "on_running"),
    ],
)
def test_bad_schedules_are_refused_with_the_reason(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        Schedule(name="bad", type="t", **kwargs)  # type: ignore[arg-type]


def test_job_decorator_declares_a_schedule_and_refuses_a_bad_one() -> None:
    try:

        @job("test.unit_nightly", schedule="0 3 * * *", tz="Europe/Moscow", misfire_grace=3600)
        def nightly(ctx: object, payload: dict[str, object]) -> None: ...

        schedule = registry.get("test.unit_nightly").schedule  # type: ignore[union-attr]
        assert schedule is not None
        assert (schedule.name, schedule.cron, schedule.tz, schedule.misfire_grace) == (
            "test.unit_nightly", "0 3 * * *", "Europe/Moscow", 3600,
        )  # fmt: skip
        assert schedule.describe() == "At 03:00 every day (Europe/Moscow)"
        with pytest.raises(ValueError, match="unknown time zone"):
            job("test.unit_bad", schedule="0 3 * * *", tz="Nowhere/Special")
        with pytest.raises(ValueError, match="at least 1 second"):
            job("test.unit_bad", schedule=dt.timedelta(milliseconds=10))
    finally:
        registry.unregister("test.unit_nightly")


def test_settings_entry_with_an_unknown_key_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="unknown key"):
        from_entry("x", {"type": "t", "every": 60, "timezone": "UTC"})
    assert from_entry("x", {"type": "t", "every": dt.timedelta(minutes=5)}).every == 300
