"""Ambiguous outcomes are reconciled, not blindly retried; unsafe types wait for a human."""

from __future__ import annotations

import pytest

from django_jobs import enqueue
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_jobs, run_until_settled
from testproject.demo.provider import FakeProvider
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_reconcile_done_completes_without_a_second_call(provider: FakeProvider) -> None:
    job = enqueue("test.reconciled_charge", {"order": "d", "query": "?drop=1"})
    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)
    assert provider.requests["rcharge-d"] == 1 and provider.lookups == 1
    assert len(provider.objects_for("rcharge-d")) == 1
    event = JobEvent.objects.get(job=job, kind=EventKind.RECONCILED)
    assert event.details == {"answer": "done", "previous_error": "NETWORK_TIMEOUT"}


def test_reconcile_not_done_runs_the_handler_again(provider: FakeProvider) -> None:
    job = enqueue("test.reconciled_charge", {"order": "n", "timeout_before_send": True})
    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)
    assert provider.lookups == 1 and provider.requests["rcharge-n"] == 1
    assert len(provider.objects_for("rcharge-n")) == 1


def test_reconcile_unknown_parks_the_job_for_review(provider: FakeProvider) -> None:
    job = enqueue(
        "test.reconciled_charge", {"order": "u", "query": "?drop=1", "lookup_query": "&lookup_status=503"}
    )
    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.last_error_code) == (JobStatus.NEEDS_REVIEW, "RECONCILE_UNKNOWN")
    assert job.finished_at is None  # parked, not finished
    assert provider.requests["rcharge-u"] == 1
    assert JobEvent.objects.filter(job=job).last().kind == EventKind.NEEDS_REVIEW  # type: ignore[union-attr]


def test_lost_execution_of_a_reconcilable_type_is_reconciled_before_rerunning(provider: FakeProvider) -> None:
    job = JobFactory(running_stale=True, type="test.reconciled_charge", payload={"order": "lost"})
    assert reaper.recover() == {"pending": 1}
    Job.objects.filter(id=job.id).update(available_at=job.created_at)  # skip the backoff wait
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert provider.lookups == 1 and provider.requests["rcharge-lost"] == 1


def test_irreversible_type_without_reconcile_is_never_retried_blindly() -> None:
    job = enqueue("test.unsafe_send", {"transfer": 1})
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.NEEDS_REVIEW, 1, "NETWORK_TIMEOUT")
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.NEEDS_REVIEW, 1)
    assert JobEvent.objects.get(job=job).kind == EventKind.NEEDS_REVIEW


def test_reconcile_requires_a_function() -> None:
    from django_jobs import job

    with pytest.raises(ValueError, match="needs a reconcile function"):
        job("scratch.reconcile", on_lost="reconcile")
