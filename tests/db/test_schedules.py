"""Firing schedule ticks against the database: once per tick, never early, misfires, overlap."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from django_jobs.checks import check_schedules
from django_jobs.maintenance.periodic import OUTAGE_RETRY, SchedulerLoop, fire
from django_jobs.maintenance.pruner import prune_ticks
from django_jobs.models import Job, ScheduleTick
from django_jobs.schedules import Schedule

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_MINUTE = Schedule(name="tick", type="test.ticked", every=60, payload={"n": 1})


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now: dt.datetime = cursor.fetchone()[0]
    return now


def last_tick() -> dt.datetime:
    return EVERY_MINUTE.next_after(db_now()) - dt.timedelta(seconds=60)


def test_a_tick_fired_twice_enqueues_one_job() -> None:
    tick = last_tick()
    first = fire(EVERY_MINUTE, tick, worker_id="a")
    second = fire(EVERY_MINUTE, tick, worker_id="b")
    assert (first.outcome, second.outcome) == ("enqueued", "taken")
    row = ScheduleTick.objects.get()
    assert (row.schedule, row.tick_at, row.outcome, row.job_id, row.worker_id) == (
        "tick", tick, "enqueued", first.job_id, "a",
    )  # fmt: skip
    job = Job.objects.get()
    assert (job.id, job.type, job.payload) == (first.job_id, "test.ticked", {"n": 1})


def test_a_tick_the_database_does_not_see_due_yet_writes_nothing() -> None:
    future = EVERY_MINUTE.next_after(db_now()) + dt.timedelta(minutes=5)
    assert fire(EVERY_MINUTE, future).outcome == "early"
    assert not ScheduleTick.objects.exists()
    assert not Job.objects.exists()


def test_a_tick_older_than_the_misfire_grace_is_recorded_as_missed() -> None:
    strict = Schedule(name="strict", type="test.ticked", every=60, misfire_grace=30)
    old = last_tick() - dt.timedelta(minutes=10)
    fired = fire(strict, old, coalesced=3)
    assert fired.outcome == "missed"
    row = ScheduleTick.objects.get()
    assert (row.outcome, row.coalesced, row.job_id) == ("missed", 3, None)
    assert not Job.objects.exists()


def test_a_tick_while_the_previous_run_is_active_is_skipped_and_recorded() -> None:
    tick = last_tick()
    first = fire(EVERY_MINUTE, tick - dt.timedelta(minutes=1))
    second = fire(EVERY_MINUTE, tick)
    assert second.outcome == "skipped"
    assert second.job_id == first.job_id
    assert list(ScheduleTick.objects.order_by("tick_at").values_list("outcome", "job_id")) == [
        ("enqueued", first.job_id),
        ("skipped", first.job_id),
    ]
    assert Job.objects.count() == 1
    # Once that job finished, the next tick enqueues again.
    Job.objects.filter(id=first.job_id).update(status="completed")
    assert fire(EVERY_MINUTE, tick + dt.timedelta(minutes=1)).outcome in {"enqueued", "early"}


def test_on_running_enqueue_lets_ticks_overlap() -> None:
    overlapping = Schedule(name="o", type="test.ticked", every=60, on_running="enqueue")
    tick = last_tick()
    assert fire(overlapping, tick - dt.timedelta(minutes=1)).outcome == "enqueued"
    assert fire(overlapping, tick).outcome == "enqueued"
    assert Job.objects.count() == 2


def test_a_restarted_scheduler_coalesces_the_ticks_it_missed_into_one_run() -> None:
    schedule = Schedule(name="tick", type="test.ticked", every=60, on_running="enqueue")
    fire(schedule, last_tick() - dt.timedelta(minutes=5))  # the last tick before "the outage"
    loop = SchedulerLoop(stop=None, worker_id="w")  # type: ignore[arg-type]  # not started
    loop.schedules = [schedule]
    ticked = loop.run_once()
    assert ticked.failed == 0 and ticked.fired == {"enqueued": 1}
    rows = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", "outcome", "coalesced"))
    assert rows == [
        (last_tick() - dt.timedelta(minutes=5), "enqueued", 0),
        (last_tick(), "enqueued", 4),
    ]
    assert Job.objects.count() == 2


def test_a_new_schedule_does_not_backfill_the_past() -> None:
    loop = SchedulerLoop(stop=None, worker_id="w")  # type: ignore[arg-type]  # not started
    loop.schedules = [EVERY_MINUTE]
    ticked = loop.run_once()
    assert not ScheduleTick.objects.exists() and ticked.fired == {}
    assert 0 < ticked.next_tick_in <= 60.01


def test_a_tick_that_cannot_be_enqueued_is_retried_after_a_pause_and_the_others_still_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = Schedule(name="broken", type="no.such.type", every=60, on_running="enqueue")
    working = Schedule(name="tick", type="test.ticked", every=60, on_running="enqueue")
    earlier = last_tick() - dt.timedelta(minutes=1)
    for schedule in (broken, working):  # each ticked a minute ago: one tick of each is due
        ScheduleTick.objects.create(schedule=schedule.name, tick_at=earlier, outcome="enqueued")
    loop = SchedulerLoop(stop=None, worker_id="w")  # type: ignore[arg-type]  # not started
    loop.schedules = [broken, working]

    assert loop.run_now() is True  # the pass itself succeeded
    assert "schedule tick failed schedule=broken" in caplog.text
    assert list(Job.objects.values_list("type", flat=True)) == ["test.ticked"]
    assert not ScheduleTick.objects.filter(schedule="broken").exclude(tick_at=earlier).exists()
    # The broken tick is still due: asked again after a pause, not at once and not in a minute.
    assert loop.next_wait() == OUTAGE_RETRY
    ticked = loop.run_once()
    assert (ticked.failed, ticked.fired) == (1, {})


def test_retention_prunes_old_tick_records_but_keeps_each_schedules_latest() -> None:
    tick = last_tick()
    for minutes in (3, 2, 1):
        fire(Schedule(name="tick", type="test.ticked", every=60, on_running="enqueue"),
             tick - dt.timedelta(minutes=minutes))  # fmt: skip
    ScheduleTick.objects.update(created_at=db_now() - dt.timedelta(days=60))
    assert prune_ticks() == 2
    assert list(ScheduleTick.objects.values_list("tick_at", flat=True)) == [tick - dt.timedelta(minutes=1)]


@pytest.mark.parametrize(
    ("schedules", "expected"),
    [
        ({"n": {"type": "test.ticked", "cron": "0 3 * * *", "tz": "Europe/Moscow"}}, []),
        ({"n": {"type": "test.ticked", "every": 5}}, []),
        ("every hour", ["django_jobs.E016"]),
        ({"n": {"type": "test.ticked", "cron": "0 25 * * *"}}, ["django_jobs.E017"]),
        ({"n": {"type": "test.ticked", "cron": "0 3 * * *", "tz": "Europe/Atlantis"}}, ["django_jobs.E017"]),
        ({"n": {"type": "test.ticked", "every": 5, "tz_name": "UTC"}}, ["django_jobs.E017"]),
        ({"n": {"type": "no.such.type", "every": 5}}, ["django_jobs.E018"]),
    ],
)
def test_schedule_checks(schedules: Any, expected: list[str]) -> None:
    with override_settings(DJANGO_JOBS={"SCHEDULES": schedules}):
        messages = check_schedules()
    assert [m.id for m in messages] == expected
    for message in messages:
        assert "SCHEDULES" in message.msg


def test_a_paused_queues_tick_waits_and_the_next_ones_skip_until_it_ran() -> None:
    from django_jobs import pause_queue

    pause_queue("default", actor="ops", reason="maintenance")
    tick = last_tick()
    first = fire(EVERY_MINUTE, tick - dt.timedelta(minutes=1))
    assert first.outcome == "enqueued"
    assert Job.objects.get(id=first.job_id).status == "pending"  # waits in the paused queue
    second = fire(EVERY_MINUTE, tick)
    assert (second.outcome, second.job_id) == ("skipped", first.job_id)  # no backlog piles up
