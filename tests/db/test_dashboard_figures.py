"""The dashboard's figures where they stop counting: a queue's counts at their cap, a busy
minute's completions, a busy hour's retry rate and processing times and a bad day's failures
read from their newest rows, the late jobs of a type with an SLA and the jobs retention will
prune, each up to a cap, and each saying so. The caps are lowered so that a few rows reach
them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_jobs.console import dashboard
from django_jobs.models import Job, JobEvent
from django_jobs.reads import activity, queues
from django_jobs.reads import dashboard as reads
from django_jobs.reads.clock import database_now
from django_jobs.states import EventKind, JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/django_jobs/job/dashboard/"
SLA_TYPE = "demo.send_welcome_email"  # sla=300 (testproject/demo/jobs.py)


@pytest.fixture
def page(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_a_queue_count_stops_at_its_cap_and_the_page_says_so(
    page: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queues, "COUNT_CAP", 3)
    JobFactory.create_batch(5, queue="emails", available_at=timezone.now() - dt.timedelta(minutes=1))
    JobFactory.create_batch(2, queue="emails", delayed=True)
    JobFactory.create_batch(2, queue="emails", failed=True)
    (row,) = [row for row in queues.queue_rows() if row.queue == "emails"]
    assert (row.pending, row.due, row.failed, row.cap) == (3, 3, 2, 3)
    assert row.oldest_due_seconds == pytest.approx(60, abs=30)  # exact, whatever the cap
    content = page.get(DASHBOARD).content.decode()
    assert '<td class="num">3+</td><td class="num">3+</td>' in content  # pending, due now
    assert "counted up to 3 per queue" in content


def test_a_busy_minute_shows_its_cap_and_a_plus(page: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MINUTE_CAP", 3)
    minute = database_now().replace(second=0, microsecond=0) - dt.timedelta(minutes=1)
    for second in (5, 10, 15, 20):
        at = minute + dt.timedelta(seconds=second)
        JobFactory(completed=True, finished_at=at, started_at=at - dt.timedelta(seconds=1))
    JobFactory(completed=True, finished_at=minute - dt.timedelta(seconds=30))  # the minute before
    recent = activity.activity()
    counts = dict(recent.throughput)
    assert len(counts) == 60 and counts[minute] == 3 and counts[minute - dt.timedelta(minutes=1)] == 1
    assert recent.capped_minutes == {minute}
    # The hour's executions are fewer than the sample: exact, the whole hour.
    assert (recent.finished, recent.retries, recent.executions_sampled) == (5, 0, False)
    content = page.get(DASHBOARD).content.decode()
    assert f"{minute:%H:%M} — 3+ completed" in content and "peak 3+/min" in content


def test_a_busy_hours_retry_rate_is_that_of_its_newest_executions(
    page: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activity, "SAMPLE", 4)
    now = database_now()
    for minutes_ago, status in enumerate(["completed", "failed", "completed", "skipped", "completed"]):
        JobFactory(status=status, finished_at=now - dt.timedelta(minutes=minutes_ago + 1))
    job = JobFactory()
    for minutes_ago in (2.5, 3.5, 30):  # two retries since the 4th newest ended, one before
        JobEvent.objects.create(
            job=job, kind=EventKind.RETRY_SCHEDULED, created_at=now - dt.timedelta(minutes=minutes_ago)
        )
    recent = activity.activity()
    assert (recent.finished, recent.retries) == (4, 2)
    assert recent.executions_sampled and not recent.retries_capped
    assert recent.executions_since == now - dt.timedelta(minutes=4)
    content = page.get(DASHBOARD).content.decode()
    assert "<strong>33 %</strong> of 6 executions since" in content


def test_a_busy_hour_and_a_bad_day_are_read_from_their_newest_rows(
    page: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activity, "SAMPLE", 4)
    now = database_now()
    for minutes_ago, type_name in enumerate(["test.noop"] * 4 + ["test.other"] * 2):
        at = now - dt.timedelta(minutes=minutes_ago + 1)
        JobFactory(completed=True, type=type_name, finished_at=at, started_at=at - dt.timedelta(seconds=2))
    for hours_ago, code in enumerate(["PROVIDER_5XX"] * 3 + ["AUTH_FAILED"] * 2):
        JobFactory(failed=True, last_error_code=code, finished_at=now - dt.timedelta(hours=hours_ago + 1))
    recent = activity.activity()
    # The newest 4 completions are all test.noop.
    assert recent.durations_sampled and recent.durations == [
        {"type": "test.noop", "count": 4, "p50": 2.0, "p95": 2.0}
    ]
    assert recent.failures_sampled and recent.failures_by_code == [("PROVIDER_5XX", 3), ("AUTH_FAILED", 1)]
    content = page.get(DASHBOARD).content.decode()
    assert "<strong>4+</strong> jobs failed in the last 24 h" in content
    assert "Failed now, by code (the newest 4)" in content
    assert "Of the newest 4 completions: the hour held more." in content


def test_late_jobs_of_a_type_are_read_from_every_kind_of_its_pending_jobs_not_its_history() -> None:
    long_ago = timezone.now() - dt.timedelta(minutes=30)
    JobFactory(type=SLA_TYPE, available_at=long_ago)  # ready, late
    JobFactory(type=SLA_TYPE, available_at=long_ago + dt.timedelta(minutes=5), priority=5)
    JobFactory(type=SLA_TYPE, available_at=long_ago, version=2)
    later = JobFactory(type=SLA_TYPE, delayed=True)  # written not ready, then late, not promoted
    Job.objects.filter(id=later.id).update(available_at=long_ago - dt.timedelta(minutes=10))
    JobFactory(type=SLA_TYPE, available_at=timezone.now() - dt.timedelta(minutes=1))  # within its SLA
    JobFactory(type=SLA_TYPE, completed=True, available_at=long_ago)  # history
    JobFactory(type="test.noop", available_at=long_ago)  # another type
    assert not Job.objects.get(id=later.id).ready

    (late, oldest) = reads.late_jobs({SLA_TYPE: 300}, cap=100)[SLA_TYPE]
    assert late == 4 and oldest == pytest.approx(40 * 60, abs=60)
    assert reads.late_jobs({SLA_TYPE: 300}, cap=2)[SLA_TYPE][0] == 2
    assert reads.late_jobs({SLA_TYPE: 3600}, cap=100) == {SLA_TYPE: (0, None)}
    assert reads.late_jobs({}, cap=100) == {}


def test_prunable_jobs_are_counted_oldest_first_up_to_a_cap() -> None:
    now = timezone.now()
    for days in (8, 9, 10):
        JobFactory(completed=True, finished_at=now - dt.timedelta(days=days))
    JobFactory.create_batch(2, completed=True, finished_at=now - dt.timedelta(days=1))
    JobFactory(status=JobStatus.SKIPPED, finished_at=now - dt.timedelta(days=8))
    week = 7 * 86400.0
    found = reads.prunable({"completed": week, "skipped": week, "cancelled": week}, cap=100)
    assert found["completed"][0] == 3 and found["skipped"][0] == 1 and found["cancelled"] == (0, None)
    oldest = found["completed"][1]
    assert oldest is not None and abs(oldest - (now - dt.timedelta(days=10))) < dt.timedelta(minutes=1)
    count, capped_oldest = reads.prunable({"completed": week}, cap=2)["completed"]
    assert count == 2 and capped_oldest == oldest  # the oldest, whatever the cap


def test_the_dashboards_caps_are_its_own(page: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "COUNT_CAP", 1)
    long_ago = timezone.now() - dt.timedelta(minutes=30)
    JobFactory.create_batch(2, type=SLA_TYPE, available_at=long_ago)
    board = page.get(DASHBOARD).context["board"]
    assert [(s["type"], s["late"], s["cap"]) for s in board.sla_breaches] == [(SLA_TYPE, 1, 1)]
    assert '<span class="djj-warn">1+</span>' in page.get(DASHBOARD).content.decode()
