"""The console's schedule ticks page: what each tick did, orphaned schedules, read-only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_jobs.models import ScheduleTick
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
