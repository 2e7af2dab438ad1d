"""The console's schedule ticks page: what each tick did, orphaned schedules, read-only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from django_jobs.maintenance.periodic import fire
from django_jobs.models import Job, ScheduleEvent, ScheduleState, ScheduleTick
from django_jobs.registry import declared_schedules
from tests.admin.console import staff

pytestmark = pytest.mark.django_db

URL = "/admin/django_jobs/scheduletick/"


def test_ticks_are_listed_with_their_schedule_in_words_and_orphans_marked(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    at = dt.datetime(2026, 6, 2, 0, tzinfo=dt.UTC)
    ScheduleTick.objects.create(schedule="demo.nightly_report", tick_at=at, outcome="enqueued", job_id=41)
    ScheduleTick.objects.create(schedule="gone.schedule", tick_at=at, outcome="missed", coalesced=2)
    page = login(superuser).get(URL).content.decode()
    assert "At 03:00 every day (Europe/Moscow) → demo.nightly_report" in page
    assert "orphaned: no longer declared" in page
    assert "/admin/django_jobs/job/41/change/" in page
    assert "Add schedule tick" not in page


def test_ticks_cannot_be_changed_or_deleted_and_need_the_view_permission(
    login: Callable[[User | None], Client],
) -> None:
    tick = ScheduleTick.objects.create(
        schedule="s", tick_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), outcome="enqueued"
    )
    assert login(staff("nobody")).get(URL).status_code == 403
    viewer = login(staff("viewer", "view_scheduletick"))
    assert viewer.get(URL).status_code == 200
    assert viewer.post(f"{URL}{tick.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ScheduleTick.objects.filter(pk=tick.pk).exists()


NIGHTLY = "demo.nightly_report"


def action(verb: str, schedule: str = NIGHTLY) -> str:
    return f"/admin/django_jobs/scheduletick/schedule/{verb}/?schedule={schedule}"


def test_the_schedules_table_shows_next_run_state_and_the_actions_allowed(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    page = login(superuser).get(URL).content.decode()
    assert f'data-schedule="{NIGHTLY}"' in page
    assert "At 03:00 every day (Europe/Moscow)" in page and "never" in page
    assert action("disable") in page and action("run") in page
    viewer_page = login(staff("viewer", "view_scheduletick")).get(URL).content.decode()
    assert f'data-schedule="{NIGHTLY}"' in viewer_page
    assert action("disable") not in viewer_page


@pytest.mark.parametrize("verb", ["disable", "enable", "run"])
def test_schedule_actions_need_the_manage_permission(
    verb: str, login: Callable[[User | None], Client]
) -> None:
    viewer = login(staff("viewer", "view_scheduletick"))
    assert viewer.get(action(verb)).status_code == 403
    assert viewer.post(action(verb), {"schedule": NIGHTLY, "reason": "x"}).status_code == 403
    assert not ScheduleEvent.objects.exists()
    assert not Job.objects.exists()


def test_disable_and_enable_are_audited_and_a_disabled_tick_enqueues_nothing(
    login: Callable[[User | None], Client],
) -> None:
    ops = login(staff("ops", "view_scheduletick", "manage_schedule"))
    assert "Reason (required)" in ops.get(action("disable")).content.decode()
    assert ops.post(action("disable"), {"schedule": NIGHTLY, "reason": ""}).status_code == 400
    response = ops.post(action("disable"), {"schedule": NIGHTLY, "reason": "month-end freeze"})
    assert response.status_code == 302
    state = ScheduleState.objects.get(name=NIGHTLY)
    assert (state.disabled_by, state.reason) == ("ops", "month-end freeze")
    assert "disabled" in ops.get(URL).content.decode()
    # A tick of a disabled schedule is recorded as such, and enqueues nothing.
    schedule = next(s for s in declared_schedules() if s.name == NIGHTLY)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    tick = schedule.next_after(now - dt.timedelta(days=1))
    assert fire(schedule, tick).outcome == "disabled"
    assert ScheduleTick.objects.get(tick_at=tick).outcome == "disabled"
    assert not Job.objects.exists()
    # Disabling twice is refused and records nothing more.
    ops.post(action("disable"), {"schedule": NIGHTLY, "reason": "again"})
    assert ops.post(action("enable"), {"schedule": NIGHTLY, "reason": "freeze over"}).status_code == 302
    assert ScheduleState.objects.get(name=NIGHTLY).disabled_at is None
    events = list(ScheduleEvent.objects.values_list("kind", "actor", "reason"))
    assert events == [("disabled", "ops", "month-end freeze"), ("enabled", "ops", "freeze over")]
    logged = list(LogEntry.objects.order_by("id").values_list("change_message", flat=True))
    assert logged == [
        f"Schedule {NIGHTLY} disabled: month-end freeze",
        f"Schedule {NIGHTLY} enabled: freeze over",
    ]


def test_run_now_enqueues_once_is_audited_and_leaves_the_next_tick_alone(
    login: Callable[[User | None], Client],
) -> None:
    ops = login(staff("ops", "view_scheduletick", "manage_schedule"))
    response = ops.post(action("run"), {"schedule": NIGHTLY, "reason": "report needed today"})
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.type, job.queue, job.status, job.unique_key) == (NIGHTLY, "reports", "pending", None)
    event = ScheduleEvent.objects.get()
    assert (event.kind, event.actor, event.reason, event.job_id) == (
        "run_now", "ops", "report needed today", job.id,
    )  # fmt: skip
    assert not ScheduleTick.objects.exists()  # no tick was taken
    schedule = next(s for s in declared_schedules() if s.name == NIGHTLY)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    fired = fire(schedule, schedule.next_after(now - dt.timedelta(days=1)))
    assert fired.outcome == "enqueued"  # not skipped because of the run-now job
    assert Job.objects.count() == 2


def test_an_orphaned_schedule_can_be_disabled_but_not_run(
    login: Callable[[User | None], Client],
) -> None:
    ScheduleTick.objects.create(
        schedule="gone", tick_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), outcome="enqueued"
    )
    ops = login(staff("ops", "view_scheduletick", "manage_schedule"))
    assert ops.get(action("run", "gone")).status_code == 400
    assert ops.get(action("disable", "unknown")).status_code == 400
    assert ops.post(action("disable", "gone"), {"schedule": "gone", "reason": "retired"}).status_code == 302
    assert ScheduleEvent.objects.get().kind == "disabled"
