"""Pausing and resuming a queue from the console: permissions, confirmation, reason, audit,
and what the dashboard shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

from django_jobs import pause_queue
from django_jobs.console.pausing import paused_queues
from django_jobs.models import Queue, QueueEvent
from tests.admin.console import DASHBOARD, staff
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def queue_url(verb: str, queue: str = "emails") -> str:
    return f"/admin/django_jobs/job/queue/{verb}/?queue={queue}"


def paused() -> list[str]:
    return [q.name for q in paused_queues()]


@pytest.mark.parametrize("who", ["superuser", "granted", "other_permissions", "view_only", "anonymous"])
def test_pause_and_resume_for_every_kind_of_user(
    who: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(queue="emails")
    user = {
        "superuser": superuser,
        "granted": staff("granted", "view_job", "pause_queue"),
        "other_permissions": staff("others", "view_job", "retry_job", "cancel_job", "resolve_job"),
        "view_only": staff("viewer", "view_job"),
        "anonymous": None,
    }[who]
    client = login(user)
    page = client.get(queue_url("pause"))
    assert paused() == []  # the confirmation page changes nothing
    done = client.post(queue_url("pause"), {"queue": "emails", "reason": "provider outage"})

    if who in ("superuser", "granted"):
        assert page.status_code == 200 and b'name="reason"' in page.content
        assert done.status_code == 302 and done["Location"].endswith("/dashboard/#queues")
        assert paused() == ["emails"]
        event = QueueEvent.objects.get()
        assert (event.kind, event.actor, event.reason) == ("paused", user.username, "provider outage")  # type: ignore[union-attr]
        entry = LogEntry.objects.get()
        assert entry.user == user and entry.object_id == "emails"
        assert entry.get_change_message() == "paused: provider outage"

        client.post(queue_url("resume"), {"queue": "emails", "reason": "provider back"})
        assert paused() == []
        assert [e.kind for e in QueueEvent.objects.order_by("id")] == ["paused", "resumed"]
        assert LogEntry.objects.count() == 2
    else:
        expected = 302 if who == "anonymous" else 403  # anonymous: to the login page
        assert (page.status_code, done.status_code) == (expected, expected)
        if who != "anonymous":
            assert b"django_jobs.pause_queue" in page.content  # says which permission it takes
        assert paused() == [] and not QueueEvent.objects.exists() and not LogEntry.objects.exists()


def test_pausing_needs_a_reason(login: Callable[[User | None], Client], superuser: User) -> None:
    JobFactory(queue="emails")
    client = login(superuser)
    for reason in ("   ", "bad\x00reason", "x" * 2001):
        response = client.post(queue_url("pause"), {"queue": "emails", "reason": reason})
        assert response.status_code == 400 and b"errornote" in response.content
    assert paused() == [] and not LogEntry.objects.exists()


@pytest.mark.parametrize("url", [queue_url("pause", "bad%20name"), queue_url("pause", "%00"),
                                 queue_url("pause", ""), queue_url("explode")])  # fmt: skip
def test_bad_queue_requests_get_a_clear_400(
    url: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    assert login(superuser).get(url).status_code == 400


def test_an_unknown_or_refused_queue_action_says_why_and_changes_nothing(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    client = login(superuser)
    client.post(queue_url("pause", "nobody-uses-this"), {"queue": "nobody-uses-this", "reason": "x"})
    assert "No job type names the queue" in client.get(DASHBOARD).content.decode()
    client.post(queue_url("resume", "default"), {"queue": "default", "reason": "x"})
    assert "is not paused" in client.get(DASHBOARD).content.decode()
    assert not Queue.objects.exists() and not QueueEvent.objects.exists() and not LogEntry.objects.exists()


def test_queue_actions_need_a_csrf_token(superuser: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    response = client.post(queue_url("pause", "default"), {"queue": "default", "reason": "x"})
    assert response.status_code == 403 and paused() == []


def test_the_dashboard_shows_who_paused_a_queue_when_and_why(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(queue="emails")
    pause_queue("emails", actor="alice", reason="provider outage")
    content = login(superuser).get(DASHBOARD).content.decode()
    assert "paused</span> since" in content and "by alice: “provider outage”" in content
    assert "/queue/resume/?queue=emails" in content and "/queue/pause/?queue=default" in content

    viewer = staff("viewer", "view_job")
    content = login(viewer).get(DASHBOARD).content.decode()
    assert "by alice: “provider outage”" in content
    assert (
        "/queue/resume/" not in content and "/queue/pause/" not in content
    )  # no buttons without the permission


def test_a_paused_queue_without_jobs_is_on_the_dashboard(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(queue="imports", completed=True)
    pause_queue("imports", actor="alice", reason="bad file upstream")
    content = login(superuser).get(DASHBOARD).content.decode()
    assert "?queue=imports" in content and "bad file upstream" in content
