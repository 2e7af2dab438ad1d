"""The article's lifecycle tests 1–4 and 9, and the outcomes around them, on a real worker."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_jobs, run_until_settled
from django_jobs.transitions import ClaimStatement, Outcome, claim, write_outcomes
from testproject.testjobs.models import BusinessRow
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_1_success_completes_the_job_with_no_event_on_the_happy_path() -> None:
    job = enqueue("test.record", {"key": "invoice:1"})
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.attempts == 1
    assert job.completed_at is not None and job.finished_at == job.completed_at
    assert job.started_at is not None and job.worker_id and job.execution_id
    assert not JobEvent.objects.filter(job=job).exists()
    row = BusinessRow.objects.get(key="invoice:1")
    assert row.execution_id == job.execution_id


def test_2_temporary_error_goes_back_to_pending_later(db_now: Callable[[], Any]) -> None:
    job = enqueue("test.flaky", {"succeed_on": 2})
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.attempts == 1
    assert job.available_at > db_now() - dt.timedelta(seconds=0.2) or job.available_at > job.started_at
    assert job.available_at > job.started_at
    assert job.last_error_code == "PROVIDER_5XX"
    assert "temporary failure on attempt 1" in (job.last_error or "")
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.from_status, event.to_status) == (
        EventKind.RETRY_SCHEDULED,
        "running",
        "pending",
    )
    assert (event.attempt, event.error_code, event.execution_id) == (1, "PROVIDER_5XX", job.execution_id)
    assert event.details is not None and 0 < event.details["retry_in"] <= 0.2

    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)


def test_3_permanent_error_fails_at_once_without_retries() -> None:
    job = enqueue("test.permanent", {"account": 9})
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 1
    assert job.last_error_code == "ENTITY_NOT_FOUND"
    assert job.failed_at is not None and job.finished_at is not None
    assert job.payload == {"account": 9} and job.worker_id  # everything an operator needs is kept
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.to_status, event.details) == (
        EventKind.FAILED,
        "failed",
        {"reason": "permanent_error", "exception": "django_jobs.PermanentError"},
    )


def test_4_exhausted_retries_end_failed() -> None:
    job = enqueue("test.flaky", {"succeed_on": 99}, max_attempts=3)
    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", "attempt"))
    assert kinds == [(EventKind.RETRY_SCHEDULED, 1), (EventKind.RETRY_SCHEDULED, 2), (EventKind.FAILED, 3)]
    assert JobEvent.objects.get(job=job, kind=EventKind.FAILED).details == {
        "reason": "attempts_exhausted",
        "exception": "django_jobs.RetryableError",
    }


def test_9_poison_job_ends_failed_instead_of_cycling() -> None:
    poison = enqueue("test.poison", {"file": "corrupt.csv"})
    healthy = [enqueue("test.noop", {"n": i}) for i in range(5)]
    run_until_settled(timeout=20)
    poison.refresh_from_db()
    assert (poison.status, poison.attempts, poison.max_attempts) == (JobStatus.FAILED, 3, 3)
    assert poison.last_error_code == "UNKNOWN"
    assert (poison.last_error or "").startswith("ZeroDivisionError: division by zero")
    assert "Traceback" in (poison.last_error or "")
    assert all(j.status == JobStatus.COMPLETED for j in Job.objects.filter(id__in=[h.id for h in healthy]))
    run_jobs()  # nothing brings it back
    poison.refresh_from_db()
    assert poison.status == JobStatus.FAILED and poison.attempts == 3


def test_skip_job_ends_skipped_not_failed() -> None:
    job = enqueue("test.skip", {"document": 1})
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.last_error_code) == (JobStatus.SKIPPED, "SKIPPED")
    assert job.failed_at is None and job.finished_at is not None
    assert JobEvent.objects.get(job=job).kind == EventKind.SKIPPED


def test_rate_limited_waits_at_least_retry_after(db_now: Callable[[], Any]) -> None:
    job = enqueue("test.rate_limited", {"retry_after": 30})
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.last_error_code == "RATE_LIMITED"
    assert job.available_at - db_now() > dt.timedelta(seconds=29)
    assert job.available_at - db_now() <= dt.timedelta(seconds=30 * 1.5 + 1)  # FAST jitter is 0.5


def test_stored_errors_are_sanitized() -> None:
    job = enqueue("test.leaky", {})
    with override_settings(DJANGO_JOBS={"DEFAULT_MAX_ATTEMPTS": 1}):
        run_jobs()
    job.refresh_from_db()
    event = JobEvent.objects.get(job=job)
    for text in (job.last_error or "", event.error or ""):
        assert "PermissionError" in text
        for secret in ("abc.def.ghi-secret-token", "hunter2", "AKIAIOSFODNN7EXAMPLE"):
            assert secret not in text


def test_stored_errors_are_bounded() -> None:
    job = enqueue("test.leaky", {}, max_attempts=1)
    with override_settings(DJANGO_JOBS={"MAX_ERROR_CHARS": 300}):
        run_jobs()
    job.refresh_from_db()
    assert len(job.last_error or "") <= 300


def test_handler_runs_outside_any_transaction() -> None:
    job = enqueue("test.in_transaction", {})
    run_jobs()
    assert BusinessRow.objects.get().key == f"in_atomic:{job.id}:False:True"


def test_worker_serves_only_its_queues() -> None:
    mail = enqueue("test.noop", {}, queue="mail")
    reports = enqueue("test.noop", {}, queue="reports")
    other = enqueue("test.noop", {}, queue="other")
    run_jobs(queues=["mail", "reports"])
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {mail.id: "completed", reports.id: "completed", other.id: "pending"}


def test_higher_priority_runs_first() -> None:
    low = JobFactory(priority=-10)
    high = JobFactory(priority=50)
    normal = JobFactory(priority=0)
    statement = ClaimStatement("w", None, {"test.noop": 1})
    assert [c.id for c in claim(statement, 10)] == [high.id, normal.id, low.id]


def test_delayed_jobs_are_not_claimed_early() -> None:
    JobFactory(delayed=True)
    assert run_jobs().claimed == 0


def test_worker_never_claims_a_type_it_does_not_know() -> None:
    unknown = JobFactory(type="newer.deploy.only")
    known = JobFactory(type="test.noop")
    run_jobs()
    assert Job.objects.get(id=unknown.id).status == JobStatus.PENDING
    assert Job.objects.get(id=known.id).status == JobStatus.COMPLETED


def test_worker_never_claims_a_payload_version_newer_than_its_code() -> None:
    newer = JobFactory(type="test.versioned", version=4)
    older = JobFactory(type="test.versioned", version=1, payload={"v1": True})
    run_jobs()
    assert Job.objects.get(id=newer.id).status == JobStatus.PENDING
    assert Job.objects.get(id=older.id).status == JobStatus.COMPLETED
    assert BusinessRow.objects.get().key == f"versioned:{older.id}:['v1', 'v2', 'v3']"


def test_undecodable_payload_fails_alone() -> None:
    broken = JobFactory(type="test.versioned", version=1, payload=["not", "an", "object"])
    fine = JobFactory(type="test.noop")
    run_jobs()
    broken.refresh_from_db()
    assert (broken.status, broken.last_error_code) == (JobStatus.FAILED, "PAYLOAD_INVALID")
    assert Job.objects.get(id=fine.id).status == JobStatus.COMPLETED


def test_outcome_of_a_stale_execution_changes_nothing() -> None:
    job = JobFactory(running=True)
    zombie = Outcome(job.id, uuid.uuid4(), JobStatus.COMPLETED)
    assert write_outcomes([zombie]) == set()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.completed_at is None
    retry = Outcome(
        job.id, uuid.uuid4(), JobStatus.PENDING, delay=1, error_code="X", event=EventKind.RETRY_SCHEDULED
    )
    assert write_outcomes([retry]) == set()
    assert not JobEvent.objects.exists()  # no event for a transition that did not happen
    owner = Outcome(job.id, job.execution_id, JobStatus.COMPLETED)
    assert write_outcomes([owner]) == {job.id}
    assert write_outcomes([owner]) == set()  # once finished, not even the owner writes again


def test_each_claim_mints_a_new_execution_id() -> None:
    # The retries are 50-200 ms apart: a burst may take the next attempt before it ends (on a
    # busy machine it does), so the executions are read from the events, not sampled per burst.
    job = enqueue("test.flaky", {"succeed_on": 3})
    for _ in range(3):
        run_jobs()
        Job.objects.filter(id=job.id, status=JobStatus.PENDING).update(
            available_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
        )
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 3)
    events = JobEvent.objects.filter(job=job, kind=EventKind.RETRY_SCHEDULED)
    retried = set(events.values_list("execution_id", flat=True))
    assert len(retried) == 2 and None not in retried and job.execution_id not in retried


def test_many_jobs_with_concurrency_all_complete_once() -> None:
    from django_jobs import enqueue_many

    enqueue_many("test.record", [{"key": f"k{i}"} for i in range(300)])
    stats = run_jobs(concurrency=4)
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 300
    assert BusinessRow.objects.count() == 300
    assert stats.outcomes["completed"] == 300 and stats.lost == 0


def test_every_recorded_transition_is_an_arrow_of_the_state_machine() -> None:
    from django_jobs.states import can_transition

    enqueue("test.flaky", {"succeed_on": 2})
    enqueue("test.permanent", {})
    enqueue("test.skip", {})
    enqueue("test.poison", {})
    run_until_settled(timeout=20)
    pairs = set(JobEvent.objects.values_list("from_status", "to_status"))
    assert pairs >= {("running", "pending"), ("running", "failed"), ("running", "skipped")}
    assert all(can_transition(a, b) for a, b in pairs), pairs
    assert not can_transition("completed", "pending") and not can_transition("pending", "completed")


def test_named_reads_select_their_status() -> None:
    pending, running, failed = JobFactory(), JobFactory(running=True), JobFactory(failed=True)
    JobFactory(completed=True)
    assert [j.id for j in Job.objects.pending()] == [pending.id]
    assert [j.id for j in Job.objects.running()] == [running.id]
    assert [j.id for j in Job.objects.failed()] == [failed.id]
    assert {j.id for j in Job.objects.active()} == {pending.id, running.id}
