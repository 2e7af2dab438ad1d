"""The metrics view of django_jobs.urls: the dashboard's per-queue numbers for Prometheus, and
who may read them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import enqueue, pause_queue
from django_jobs.console import dashboard
from django_jobs.states import JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

URL = "/jobs/metrics"
TOKEN = "a-metrics-token-long-enough-0123"
#: The exported gauge for each attribute of a dashboard row.
GAUGES = {
    "waiting": "django_jobs_queue_waiting",
    "pending": "django_jobs_queue_pending",
    "due": "django_jobs_queue_due",
    "running": "django_jobs_queue_running",
    "stale": "django_jobs_queue_stale_running",
    "failed": "django_jobs_queue_failed",
    "needs_review": "django_jobs_queue_needs_review",
}


def scrape(client: Client, **headers: str) -> dict[tuple[str, str], float]:
    response = client.get(URL, **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, sample.labels.get("queue", "")): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def a_mixed_table() -> None:
    hour_ago = timezone.now() - dt.timedelta(hours=1)
    # The test's transaction fixes the database's now() at its start: due jobs are due before.
    JobFactory.create_batch(3, queue="emails", available_at=timezone.now() - dt.timedelta(minutes=1))
    JobFactory(queue="emails", available_at=hour_ago)
    JobFactory.create_batch(2, queue="emails", delayed=True)
    JobFactory.create_batch(2, queue="reports", running=True)
    JobFactory(queue="reports", running_stale=True)
    JobFactory.create_batch(4, queue="reports", failed=True)
    JobFactory(queue="emails", failed=True)
    JobFactory(queue="webhooks", status=JobStatus.NEEDS_REVIEW)
    JobFactory.create_batch(5, queue="default", completed=True)
    pause_queue("webhooks", actor="ops", reason="provider down")


@override_settings(DJANGO_JOBS={"METRICS_TOKEN": TOKEN})
def test_the_gauges_are_the_dashboards_numbers(client: Client) -> None:
    a_mixed_table()
    got = scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    rows = dashboard.build().queues
    assert {row.queue for row in rows} >= {"emails", "reports", "webhooks", "default"}
    for row in rows:
        for attr, gauge in GAUGES.items():
            assert got[(gauge, row.queue)] == getattr(row, attr), (row.queue, gauge)
        assert got[("django_jobs_queue_oldest_due_seconds", row.queue)] == pytest.approx(
            row.oldest_due_seconds or 0, abs=2
        )
        assert got[("django_jobs_queue_paused", row.queue)] == (1 if row.paused_at else 0)
    # And the numbers themselves, so that a wrong dashboard cannot make this pass.
    assert got[("django_jobs_queue_due", "emails")] == 4
    assert got[("django_jobs_queue_pending", "emails")] == 6
    assert got[("django_jobs_queue_oldest_due_seconds", "emails")] == pytest.approx(3600, abs=60)
    assert got[("django_jobs_queue_stale_running", "reports")] == 1
    assert got[("django_jobs_queue_failed", "reports")] == 4
    assert got[("django_jobs_queue_needs_review", "webhooks")] == 1
    assert got[("django_jobs_queue_paused", "webhooks")] == 1


@override_settings(DJANGO_JOBS={"METRICS_TOKEN": TOKEN})
def test_the_view_adds_this_processs_enqueue_counter(client: Client) -> None:
    def enqueued() -> float:
        got = scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        return got.get(("django_jobs_enqueued_total", "emails"), 0)

    before = enqueued()
    enqueue("test.noop", {}, queue="emails")
    enqueue("test.noop", {}, queue="emails", unique_key="once")
    enqueue("test.noop", {}, queue="emails", unique_key="once")  # deduplicated: no new job
    assert enqueued() - before == 2


@override_settings(DJANGO_JOBS={"METRICS_TOKEN": TOKEN})
def test_anonymous_scrapes_and_wrong_tokens_are_refused(client: Client) -> None:
    anonymous = client.get(URL)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    for header in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}", TOKEN):
        response = client.get(URL, HTTP_AUTHORIZATION=header)
        assert response.status_code == 401, header
        assert b"django_jobs_queue" not in response.content


def test_without_a_configured_token_no_token_is_accepted(client: Client) -> None:
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer None").status_code == 401


@override_settings(DJANGO_JOBS={"METRICS_TOKEN": TOKEN})
def test_the_right_token_and_a_staff_user_are_accepted(client: Client) -> None:
    assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get(URL, HTTP_AUTHORIZATION=f"bearer  {TOKEN} ").status_code == 200  # spacing, case
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(URL).status_code == 200


def test_a_signed_in_user_who_is_not_staff_is_forbidden(client: Client) -> None:
    client.force_login(User.objects.create_user("customer", password="pw"))
    assert client.get(URL).status_code == 403
    client.force_login(User.objects.create_user("former", password="pw", is_staff=True, is_active=False))
    assert client.get(URL).status_code != 200


def test_only_get_is_served(client: Client) -> None:
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    assert client.post(URL).status_code == 405
