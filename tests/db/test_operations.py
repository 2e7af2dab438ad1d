"""``django_jobs.retry`` / ``django_jobs.cancel`` and ``manage.py jobs``: the console's actions
from Python and from a shell, with the console's audit (a ``JobEvent`` saying who and why, an
admin ``LogEntry`` for a Django user), in one transaction, refusing what does not apply."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import IntegrityError
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

import django_jobs
from django_jobs import ActionRefused, CancelResult, JobNotFound, enqueue
from django_jobs.console import actions
from django_jobs.console.actions import default_actor
from django_jobs.models import Job, JobEvent, JobSignal
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_durable
from tests.factories import JobFactory
from tests.process.workers import ROOT

pytestmark = pytest.mark.django_db


def jobs(*args: str) -> tuple[str, str]:
    """Run ``manage.py jobs`` in this process; its stdout and stderr."""
    out, err = StringIO(), StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def untouched(job: Job) -> bool:
    """Nothing was written about the job: same status, no event, no log entry."""
    before = job.status
    job.refresh_from_db()
    return (
        job.status == before
        and not JobEvent.objects.filter(job=job).exists()
        and not LogEntry.objects.filter(object_id=str(job.id)).exists()
    )


# ---- from Python ---------------------------------------------------------------------------------


def test_retry_from_python_leaves_the_consoles_audit() -> None:
    alice = User.objects.create_user("alice")
    job = JobFactory(failed=True, attempts=5)
    assert django_jobs.retry(job.id, reason="provider fixed", actor=alice) == JobStatus.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.manual_retries) == (JobStatus.PENDING, 0, 1)
    assert job.retried_by == "alice"
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.actor, event.reason) == (EventKind.MANUAL_RETRY, "alice", "provider fixed")
    entry = LogEntry.objects.get(object_id=str(job.id))
    assert entry.user == alice and entry.is_change()
    assert entry.get_change_message() == "retried (was failed): provider fixed"


def test_the_admins_recent_actions_name_the_action_first() -> None:
    # Recent actions shows each entry's object_repr: the action, then the job it acted on,
    # never the status the job had before it.
    alice = User.objects.create_user("alice", is_staff=True, is_superuser=True)
    failed, pending, running = JobFactory(failed=True), JobFactory(), JobFactory(running=True)
    parked = JobFactory(status=JobStatus.NEEDS_REVIEW)
    django_jobs.retry(failed.id, reason="provider fixed", actor=alice)
    django_jobs.cancel(pending.id, reason="duplicate order", actor=alice)
    django_jobs.cancel(running.id, reason="wrong customer", actor=alice)
    actions.resolve(parked.id, to="completed", reason="the charge went through", actor=alice)
    titles = list(LogEntry.objects.order_by("id").values_list("object_repr", flat=True))
    assert titles == [
        f"Retried test.noop #{failed.id} (was failed)",
        f"Cancelled test.noop #{pending.id}",
        f"Asked test.noop #{running.id} to stop (cancellation requested)",
        f"Resolved test.noop #{parked.id} as completed",
    ]
    client = Client()
    client.force_login(alice)
    page = client.get(reverse("admin:index")).content.decode()
    assert f"Retried test.noop #{failed.id} (was failed)" in page and "(failed)</a>" not in page


def test_cancel_from_python_cancels_a_pending_job_and_asks_a_running_one() -> None:
    pending, running = JobFactory(), JobFactory(running=True)
    cancelled = django_jobs.cancel(pending.id, reason="duplicate order", actor="billing-cron")
    requested = django_jobs.cancel(running.id, reason="wrong customer", actor="billing-cron")
    assert (cancelled, requested) == (CancelResult.CANCELLED, CancelResult.REQUESTED)
    pending.refresh_from_db()
    running.refresh_from_db()
    assert pending.status == JobStatus.CANCELLED
    assert running.status == JobStatus.RUNNING and running.cancel_requested_at is not None
    assert [(e.kind, e.actor, e.reason) for e in JobEvent.objects.order_by("id")] == [
        (EventKind.CANCELLED, "billing-cron", "duplicate order"),
        (EventKind.CANCEL_REQUESTED, "billing-cron", "wrong customer"),
    ]
    assert not LogEntry.objects.exists()  # a plain name owns no admin log entry


def test_without_an_actor_the_history_names_the_system_user_and_host() -> None:
    job = JobFactory(failed=True)
    django_jobs.retry(job.id, reason="again")
    assert JobEvent.objects.get(job=job).actor == default_actor()
    assert "@" in default_actor()


def test_what_does_not_apply_is_refused_and_writes_nothing() -> None:
    done, requested = JobFactory(completed=True), JobFactory(running=True)
    django_jobs.cancel(requested.id, reason="first request", actor="ops")
    JobEvent.objects.all().delete()
    with pytest.raises(ActionRefused, match="it is completed"):
        django_jobs.cancel(done.id, reason="too late", actor=User.objects.create_user("bob"))
    with pytest.raises(ActionRefused, match="already requested"):
        django_jobs.cancel(requested.id, reason="second request", actor="ops")
    with pytest.raises(ActionRefused, match="only failed, cancelled or parked"):
        django_jobs.retry(done.id, reason="again", actor="ops")
    assert untouched(done)
    assert not JobEvent.objects.exists()


def test_bad_input_is_a_clear_error_before_anything_is_written() -> None:
    job = JobFactory(failed=True)
    with pytest.raises(JobNotFound, match="no job has id 999999"):
        django_jobs.retry(999999, reason="again")
    for reason, problem in (
        ("", "Say why"),
        ("   ", "Say why"),
        ("a\x00b", "NUL"),
        ("x" * 2001, "under 2000"),
    ):
        with pytest.raises(ValueError, match=problem):
            django_jobs.retry(job.id, reason=reason)
    for actor in ("", "x" * 151, "a\x00b"):
        with pytest.raises(ValueError, match="actor"):
            django_jobs.cancel(job.id, reason="why", actor=actor)
    for not_an_id in ("12", 0, -1, 2**63, True):
        with pytest.raises(ValueError, match="not a job id"):
            django_jobs.retry(not_an_id, reason="again")  # type: ignore[arg-type]
    assert untouched(job)


def test_a_unique_key_held_by_another_job_refuses_the_retry() -> None:
    failed = JobFactory(failed=True, unique_key="invoice:9")
    JobFactory(unique_key="invoice:9")
    with pytest.raises(ActionRefused, match="holds its unique key"):
        django_jobs.retry(failed.id, reason="again", actor="ops")
    assert untouched(failed)


@pytest.mark.django_db(transaction=True)
def test_the_transition_its_event_and_the_log_entry_commit_together_or_not_at_all() -> None:
    # The log entry's user is gone: its foreign key fails at COMMIT, after the transition and
    # its event were written. All three must go.
    ghost = User.objects.create_user("ghost")
    User.objects.filter(pk=ghost.pk).delete()
    job = JobFactory(failed=True)
    with pytest.raises(IntegrityError):
        django_jobs.retry(job.id, reason="provider fixed", actor=ghost)
    assert untouched(job)


# ---- manage.py jobs ------------------------------------------------------------------------------


def test_jobs_retry_and_cancel_record_the_system_user_of_the_shell() -> None:
    failed, pending = JobFactory(failed=True), JobFactory()
    out, _ = jobs("retry", str(failed.id), "--reason", "provider fixed")
    assert out == f"job {failed.id}: retried (was failed)\n"
    out, _ = jobs("cancel", str(pending.id), "--reason", "duplicate")
    assert out == f"job {pending.id}: cancelled\n"
    actors = set(JobEvent.objects.values_list("actor", flat=True))
    assert actors == {f"cli:{default_actor()}"}


def test_jobs_as_a_django_user_writes_the_admin_history_too() -> None:
    User.objects.create_user("carol")
    job = JobFactory(running=True)
    out, _ = jobs("cancel", str(job.id), "--reason", "wrong customer", "--user", "carol")
    assert "cancellation requested" in out
    assert JobEvent.objects.get(job=job).actor == "carol"
    assert LogEntry.objects.get(object_id=str(job.id)).user.username == "carol"
    with pytest.raises(CommandError, match="no Django user is named 'nobody'"):
        jobs("cancel", str(job.id), "--reason", "x", "--user", "nobody")


def test_jobs_does_what_applies_and_fails_for_the_rest() -> None:
    failed, done = JobFactory(failed=True), JobFactory(completed=True)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="2 of 3 job"):
        call_command(
            "jobs", "retry", str(failed.id), str(done.id), "999999", "--reason", "again", "--actor", "ops",
            stdout=out, stderr=err,
        )  # fmt: skip
    assert out.getvalue() == f"job {failed.id}: retried (was failed)\n"
    assert f"job {done.id}: job {done.id} was not retried" in err.getvalue()
    assert "job 999999: no job has id 999999" in err.getvalue()
    assert untouched(done)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["retry", "12"], "--reason"),
        (["retry", "12", "--reason", ""], "Say why"),
        (["retry", "twelve", "--reason", "x"], "not a job id"),
        (["cancel", "12", "--reason", "x", "--actor", "a", "--user", "b"], "not allowed with"),
        (["list", "--status", "faild"], "invalid choice: 'faild'"),
        (["list", "--code", "a b"], "'a b' is not an error code"),
        (["list", "--type", "x" * 300], "is not a job type name"),
        (["list", "--queue", "a/b"], "'a/b' is not a queue name"),
        (["list", "--limit", "0"], "'0' is not a limit"),
        (["list", "--limit", "1001"], "'1001' is not a limit"),
        (["list", "--limit", "-5"], "is not a limit"),
        (["explain", "0"], "not a job id"),
        (["wake", "12"], "the following arguments are required: --reason"),
        (["wake", "--reason", "r"], "the following arguments are required: ID"),
        (["signal", "12", "paid", "--data", "{oops", "--reason", "r"], "the data is not JSON"),
        (["signal", "12", "bad name!", "--reason", "r"], "a signal name must be"),
        (["signal", "12", "paid", "--data", "NaN", "--reason", "r"], "is nan, which is not valid JSON"),
        (["signal", "12", "paid", "--reason", "r"], "only a pending, running or waiting job takes one"),
        (["forget", "12"], "invalid choice: 'forget'"),
    ],
)
def test_jobs_refuses_bad_arguments_saying_what_is_wrong(args: list[str], message: str) -> None:
    job = JobFactory(failed=True, id=12)
    with pytest.raises(CommandError, match=message):
        jobs(*args)
    assert untouched(job)


def test_jobs_list_filters_by_status_code_type_and_queue_newest_first() -> None:
    wanted = [JobFactory(failed=True, last_error_code="AUTH_FAILED", queue="emails") for _ in range(3)]
    JobFactory(failed=True, last_error_code="PROVIDER_5XX", queue="emails")
    JobFactory(last_error_code="AUTH_FAILED", queue="emails")  # pending, retried after it
    JobFactory(failed=True, last_error_code="AUTH_FAILED", queue="default")
    JobFactory(failed=True, last_error_code="AUTH_FAILED", queue="emails", type="test.other")
    out, _ = jobs(
        "list", "--status", "failed", "--code", "AUTH_FAILED", "--queue", "emails", "--type=test.noop"
    )
    ids = [int(line.split("\t")[0]) for line in out.splitlines()]
    assert ids == sorted((job.id for job in wanted), reverse=True)
    assert out.splitlines()[0].split("\t")[1:6] == ["failed", "test.noop", "emails", "5/5", "AUTH_FAILED"]
    out, _ = jobs("list", "--status", "failed", "--code", "AUTH_FAILED", "--limit", "2", "--json")
    assert len(out.splitlines()) == 2 and '"status": "failed"' in out.splitlines()[0]
    _, err = jobs("list", "--code", "NEVER_SEEN")
    assert err == "no job matches\n"


def test_jobs_list_prints_the_time_of_its_order_beside_when_a_job_finished() -> None:
    # The last enqueued first: a job enqueued earlier that failed later still comes after.
    early = JobFactory(failed=True, queue="emails")
    late = JobFactory(failed=True, queue="emails")
    Job.objects.filter(id=early.id).update(
        created_at=Now() - timedelta(hours=2), finished_at=Now() - timedelta(minutes=1)
    )
    Job.objects.filter(id=late.id).update(
        created_at=Now() - timedelta(hours=1), finished_at=Now() - timedelta(minutes=30)
    )
    out, _ = jobs("list", "--queue", "emails")
    rows = [line.split("\t") for line in out.splitlines()]
    assert [int(row[0]) for row in rows] == [late.id, early.id]
    enqueued, finished = [row[6] for row in rows], [row[7] for row in rows]
    assert enqueued == sorted(enqueued, reverse=True)
    assert finished == sorted(finished)  # the later failure is listed second: it was enqueued first
    for row, job in zip(rows, (late, early), strict=True):
        job.refresh_from_db()
        assert row[6:] == [f"{moment:%Y-%m-%d %H:%M:%S %Z}" for moment in (job.created_at, job.finished_at)]


def test_jobs_explain_says_what_explainjob_says() -> None:
    job = JobFactory(delayed=True)
    explained, _ = jobs("explain", str(job.id))
    out = StringIO()
    call_command("explainjob", str(job.id), stdout=out)
    assert explained == out.getvalue() and explained.startswith(f"job {job.id}: delayed\n")
    with pytest.raises(CommandError, match="no job has id 999999"):
        jobs("explain", "999999")


@pytest.mark.django_db(transaction=True)
def test_jobs_exits_non_zero_with_the_refusal_on_stderr(worker_env: dict[str, str]) -> None:
    done = JobFactory(completed=True)
    result = subprocess.run(
        [sys.executable, "manage.py", "jobs", "cancel", str(done.id), "--reason", "too late"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result
    assert f"job {done.id} was not cancelled: it is completed" in result.stderr
    assert result.stdout == ""
    assert untouched(done)


def test_jobs_wake_and_signal_act_on_durable_jobs_as_the_console_does() -> None:
    sleeper = run_durable(enqueue("test.durable", {"run": "cli", "script": [["sleep", 3600], ["step", "a"]]}))
    waiter = run_durable(enqueue("test.durable", {"run": "cli", "script": [["wait", "paid", 3600]]}))
    out, _ = jobs("wake", str(sleeper.id), "--reason", "customer asked", "--actor", "ann")
    assert out == f"job {sleeper.id}: woken (its sleep 'sleep#1' ended), due now\n"
    event = JobEvent.objects.filter(job=sleeper).latest("id")
    assert (event.kind, event.actor, event.reason) == (EventKind.WOKEN, "ann", "customer asked")
    assert run_durable(sleeper).status == JobStatus.COMPLETED

    with pytest.raises(CommandError, match="1 of 1 job"):
        jobs("wake", str(waiter.id), "--reason", "try", "--actor", "ann")  # it waits, and is not woken
    out, _ = jobs("signal", str(waiter.id), "paid", "--data", '{"amount": 5}', "--reason", "by phone")
    assert out == f"job {waiter.id}: signal 'paid' sent\n"
    out, _ = jobs("signal", str(waiter.id), "paid", "--data", "6", "--reason", "again")
    assert "not stored: one of that name had come already" in out
    assert JobSignal.objects.get(job=waiter).data == {"amount": 5}
    assert run_durable(waiter).return_value == [{"amount": 5}]
    sent = JobEvent.objects.filter(job=waiter, kind=EventKind.SIGNAL_SENT).count()
    assert sent == 2 and not JobEvent.objects.filter(job=waiter, kind=EventKind.WOKEN).exists()
