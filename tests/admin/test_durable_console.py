"""A durable job's page lists its steps, sleeps and waits in order, each with its state, its
times and a preview of its result, masked for whoever may not see sensitive values; an operator
with ``signal_job`` wakes a sleeping job or sends a signal, audited, and bad input writes
nothing."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

from django_jobs import enqueue
from django_jobs.console import durable_actions
from django_jobs.errors import JobNotFound
from django_jobs.models import Job, JobEvent, JobSignal
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import assert_steps, run_durable, where
from django_jobs.transitions import ActionRefused
from tests.admin.console import act_url, detail_url, staff

pytestmark = pytest.mark.django_db


def test_the_job_page_shows_the_steps_with_their_state_and_a_masked_preview(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    script = [["step", "charge"], ["secret_step", "token"], ["wait", "paid", 3600]]
    job = enqueue("test.durable", {"run": "page", "script": script}, signal_key="page:1")
    run_durable(job)

    page = login(superuser).get(detail_url(job.id)).content.decode()
    assert 'id="job-steps"' in page
    steps = page[page.index('id="job-steps"') : page.index('id="job-history"')]
    for expected in ("<code>charge</code>", "done", "<code>paid</code>", "waiting", "sk_live_51Hx"):
        assert expected in steps, expected

    viewer = staff("viewer", "view_job")
    masked = login(viewer).get(detail_url(job.id)).content.decode()
    steps = masked[masked.index('id="job-steps"') : masked.index('id="job-history"')]
    assert "sk_live_51Hx" not in masked and "&quot;charge&quot;: 7" in steps


def test_a_job_that_is_not_durable_shows_no_steps(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    job = enqueue("test.noop", {})
    assert 'id="job-steps"' not in login(superuser).get(detail_url(job.id)).content.decode()


def asleep(run: str) -> Job:
    """A durable job that recorded a step and sleeps for an hour."""
    return run_durable(
        enqueue("test.durable", {"run": run, "script": [["step", "a"], ["sleep", 3600], ["step", "b"]]})
    )


def waiting(run: str, key: str) -> Job:
    """A durable job that recorded a step and waits an hour for signal ``paid``."""
    script = [["step", "charge"], ["wait", "paid", 3600], ["step", "ship"]]
    return run_durable(enqueue("test.durable", {"run": run, "script": script}, signal_key=key))


def test_wake_now_is_offered_for_a_sleeping_job_only_and_is_audited(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    job, waiter, plain = asleep("wake"), waiting("wake", "wake:1"), enqueue("test.noop", {}, delay=3600)
    retrier = login(staff("retrier", "view_job", "retry_job"))
    assert "Wake now…" not in retrier.get(detail_url(job.id)).content.decode()
    operator = login(staff("operator", "view_job", "signal_job"))
    assert "Wake now…" in operator.get(detail_url(job.id)).content.decode()
    for other in (waiter, plain):  # pending too, but asleep they are not
        assert "Wake now…" not in operator.get(detail_url(other.id)).content.decode()

    confirm = operator.get(act_url("wake", job.id))
    seen = re.search(r'name="seen" value="([^"]*)"', confirm.content.decode())
    assert seen is not None
    done = operator.post(
        act_url("wake", job.id), {"ids": str(job.id), "reason": "the customer asked", "seen": seen[1]}
    )
    assert done.status_code == 302
    event = JobEvent.objects.filter(job=job).latest("id")
    assert (event.kind, event.actor, event.reason) == (EventKind.WOKEN, "operator", "the customer asked")
    assert event.details["sleep"] == "sleep#2" and "until" in event.details
    assert LogEntry.objects.get(object_id=str(job.id)).user.username == "operator"
    assert where(job) is None  # its sleep is over, and it is due now
    assert run_durable(job).status == JobStatus.COMPLETED
    assert_steps(job, ["a", "sleep#2", "b"])

    # The same form again: the job is no longer as the page showed it; nothing is written.
    events = JobEvent.objects.count()
    again = operator.post(act_url("wake", job.id), {"ids": str(job.id), "reason": "twice", "seen": seen[1]})
    assert again.status_code == 302 and JobEvent.objects.count() == events


@pytest.mark.parametrize("which", ["waiting", "not durable"])
def test_wake_refuses_a_job_that_does_not_sleep_and_says_why(
    which: str, superuser: User, login: Callable[[User | None], Client]
) -> None:
    job = waiting("refuse", "refuse:1") if which == "waiting" else enqueue("test.noop", {}, delay=3600)
    events = JobEvent.objects.filter(job=job).count()
    with pytest.raises(ActionRefused) as refused:
        durable_actions.wake(job.id, reason="try", actor="ann")
    said = "waits for signal 'paid'" if which == "waiting" else "does not sleep"
    assert said in str(refused.value)
    page = login(superuser).post(act_url("wake", job.id), {"ids": str(job.id), "reason": "try"}, follow=True)
    assert said in html.unescape(page.content.decode())
    assert JobEvent.objects.filter(job=job).count() == events and not LogEntry.objects.exists()
    assert Job.objects.get(id=job.id).available_at == job.available_at


def test_send_signal_from_the_console_wakes_the_waiting_job_and_is_audited(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    job = waiting("console", "console:1")
    operator = login(staff("operator", "view_job", "signal_job"))
    page = operator.get(detail_url(job.id)).content.decode()
    assert 'id="send-signal"' in page
    form = operator.get(f"/admin/django_jobs/job/signal/{job.id}/").content.decode()
    assert 'value="paid"' in form and "times out at" in form  # the name it waits for, filled in

    url = f"/admin/django_jobs/job/signal/{job.id}/"
    done = operator.post(url, {"name": "paid", "data": '{"amount": 1200}', "reason": "paid by phone"})
    assert done.status_code == 302 and done["Location"] == detail_url(job.id)
    signal = JobSignal.objects.get(job=job)
    assert (signal.name, signal.key, signal.data) == ("paid", "console:1", {"amount": 1200})
    event = JobEvent.objects.filter(job=job).latest("id")
    assert (event.kind, event.actor, event.reason) == (EventKind.SIGNAL_SENT, "operator", "paid by phone")
    assert event.details == {"signal": "paid", "stored": True, "woke": True}
    assert "1200" not in str(event.details)  # the data is the signal's, not the history's
    assert LogEntry.objects.filter(object_id=str(job.id)).count() == 1
    ended = run_durable(job)
    assert ended.status == JobStatus.COMPLETED and ended.return_value[1] == {"amount": 1200}

    # A second signal of the name: recorded as an action, not stored; the first stands.
    finished = operator.post(url, {"name": "paid", "data": "2", "reason": "again"}, follow=True)
    assert "takes no signal" in finished.content.decode() or "was sent no signal" in finished.content.decode()
    assert JobSignal.objects.filter(job=job).count() == 1


def test_a_second_signal_of_a_name_is_recorded_but_the_first_stands(
    login: Callable[[User | None], Client],
) -> None:
    job = waiting("twice", "twice:1")
    assert durable_actions.send_signal(job.id, "paid", {"n": 1}, reason="first", actor="ann") is True
    assert durable_actions.send_signal(job.id, "paid", {"n": 2}, reason="second", actor="bob") is False
    assert JobSignal.objects.get(job=job).data == {"n": 1}
    sent = JobEvent.objects.filter(job=job, kind=EventKind.SIGNAL_SENT).order_by("id")
    assert [(e.actor, e.details["stored"]) for e in sent] == [("ann", True), ("bob", False)]


def test_a_signal_before_the_wait_is_kept_for_it() -> None:
    job = enqueue("test.durable", {"run": "early", "script": [["wait", "paid", 3600]]})  # no key
    assert durable_actions.send_signal(job.id, "paid", "early", reason="sent ahead", actor="ann") is True
    ended = run_durable(job)
    assert ended.status == JobStatus.COMPLETED and ended.return_value == ["early"]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"name": "paid", "data": "{not json", "reason": "r"}, "the data is not JSON"),
        ({"name": "paid", "data": "NaN", "reason": "r"}, "is nan, which is not valid JSON"),
        ({"name": "bad name!", "data": "", "reason": "r"}, "a signal name must be"),
        ({"name": "paid", "data": "", "reason": " "}, "Say why"),
        ({"name": "paid", "data": '"' + "x" * 2_000_000 + '"', "reason": "r"}, "MAX_PAYLOAD_BYTES"),
    ],
)
def test_a_bad_signal_form_is_said_again_and_nothing_is_written(
    fields: dict[str, str], said: str, superuser: User, login: Callable[[User | None], Client]
) -> None:
    job = waiting("bad", "bad:1")
    events = JobEvent.objects.filter(job=job).count()
    response = login(superuser).post(f"/admin/django_jobs/job/signal/{job.id}/", fields)
    assert response.status_code == 400
    assert said in html.unescape(response.content.decode())
    assert not JobSignal.objects.exists() and JobEvent.objects.filter(job=job).count() == events
    assert not LogEntry.objects.exists()
    if fields["name"] == "paid" and fields["reason"] == "r" and len(fields["data"]) < 100:
        assert html.escape(fields["data"]) in response.content.decode()  # what was typed stays


def test_sending_a_signal_needs_its_permission(login: Callable[[User | None], Client]) -> None:
    job = waiting("perm", "perm:1")
    url = f"/admin/django_jobs/job/signal/{job.id}/"
    for user in (staff("viewer", "view_job"), staff("retrier", "view_job", "retry_job", "cancel_job")):
        client = login(user)
        assert 'id="send-signal"' not in client.get(detail_url(job.id)).content.decode()
        assert client.get(url).status_code == 403
        assert client.post(url, {"name": "paid", "data": "1", "reason": "r"}).status_code == 403
        client.logout()
    assert login(None).get(url).status_code == 302  # to the login page
    assert not JobSignal.objects.exists()


def test_an_ended_job_takes_no_signal(superuser: User, login: Callable[[User | None], Client]) -> None:
    job = enqueue("test.durable", {"run": "ended", "script": [["step", "a"]]})
    run_durable(job)
    client = login(superuser)
    assert 'id="send-signal"' not in client.get(detail_url(job.id)).content.decode()
    assert "takes no signal" in client.get(f"/admin/django_jobs/job/signal/{job.id}/").content.decode()
    with pytest.raises(ActionRefused, match="only a pending, running or waiting job takes one"):
        durable_actions.send_signal(job.id, "paid", reason="late", actor="ann")
    with pytest.raises(JobNotFound):
        durable_actions.send_signal(10**12, "paid", reason="nobody", actor="ann")
    assert not JobSignal.objects.exists()
