"""An outcome the database refuses to store ends its job where decide() sends an unstorable
outcome: a cancel request and a type that forbids a blind retry are honoured there too.

Each test claims a real job on real PostgreSQL and hands the outcome writer an outcome that
bypassed sanitising (PostgreSQL refuses NUL characters in text), as a handler's data could.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.runtime import outcomes
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import CancelResult, Claim, ClaimStatement, Outcome, cancel, claim, mark_call

pytestmark = pytest.mark.django_db(transaction=True)


def _claimed(job_type: str) -> Claim:
    job = enqueue(job_type, {})
    (claimed,) = claim(ClaimStatement("w-1", None, {job_type: 1}), 1)
    assert claimed.id == job.id
    return claimed


def _poisoned(c: Claim, status: str = JobStatus.PENDING) -> Outcome:
    """A retry whose error text the database refuses."""
    return Outcome(
        c.id, c.execution_id, status, delay=1.0, error_code="X", error="a\x00b", attempts=c.attempt
    )


def _ending_event(job_id: int) -> JobEvent:
    """The event of the arrow out of running (a cancel request leaves one that stays running)."""
    (event,) = JobEvent.objects.filter(job_id=job_id, from_status=JobStatus.RUNNING).exclude(
        to_status=JobStatus.RUNNING
    )
    return event


def test_a_refused_outcome_of_a_job_whose_cancellation_was_requested_ends_it_cancelled() -> None:
    c = _claimed("test.noop")
    assert cancel(c.id, actor="alice") == CancelResult.REQUESTED
    written = outcomes._write([_poisoned(c)])
    assert written[c.id].status == JobStatus.CANCELLED
    job = Job.objects.get(id=c.id)
    assert (job.status, job.last_error_code) == (JobStatus.CANCELLED, "OUTCOME_INVALID")
    assert "could not be stored" in job.last_error and job.finished_at is not None
    event = _ending_event(c.id)
    assert (event.kind, event.to_status, event.error_code) == (
        EventKind.CANCELLED,
        JobStatus.CANCELLED,
        "OUTCOME_INVALID",
    )


def test_a_refused_outcome_of_a_type_that_forbids_a_blind_retry_parks_the_job_for_review() -> None:
    c = _claimed("test.unsafe")  # on_lost="needs_review"
    written = outcomes._write([_poisoned(c, JobStatus.FAILED)])
    assert written[c.id].status == JobStatus.NEEDS_REVIEW
    job = Job.objects.get(id=c.id)
    assert (job.status, job.last_error_code, job.attempts) == (JobStatus.NEEDS_REVIEW, "OUTCOME_INVALID", 1)
    assert _ending_event(c.id).kind == EventKind.NEEDS_REVIEW


def test_a_refused_outcome_of_a_job_with_attempts_left_ends_it_failed_not_retried() -> None:
    c = _claimed("test.noop")
    assert c.attempt < c.max_attempts
    written = outcomes._write([_poisoned(c)])
    assert written[c.id].status == JobStatus.FAILED
    job = Job.objects.get(id=c.id)
    assert (job.status, job.last_error_code) == (JobStatus.FAILED, "OUTCOME_INVALID")
    event = _ending_event(c.id)
    assert (event.kind, event.details) == (EventKind.FAILED, {"reason": "outcome_invalid"})


def test_a_refused_outcome_of_a_marking_type_is_parked_only_after_a_mark() -> None:
    """For a type that marks its external calls, the marks decide instead of on_lost."""
    unmarked, marked = _claimed("test.marked_charge"), _claimed("test.marked_charge")
    assert mark_call(marked.id, marked.execution_id, "charge") is not None
    written = outcomes._write([_poisoned(unmarked), _poisoned(marked)])
    assert {job_id: o.status for job_id, o in written.items()} == {
        unmarked.id: JobStatus.FAILED,
        marked.id: JobStatus.NEEDS_REVIEW,
    }


def test_a_refused_outcome_of_an_execution_that_lost_its_job_writes_nothing() -> None:
    c = _claimed("test.noop")
    stale = dataclasses.replace(_poisoned(c), execution_id=uuid.uuid4())
    assert outcomes._write([stale]) == {}
    job = Job.objects.get(id=c.id)
    assert (job.status, job.execution_id) == (JobStatus.RUNNING, c.execution_id)
    assert not JobEvent.objects.filter(job_id=c.id, from_status=JobStatus.RUNNING).exists()


def test_whole_seconds_are_written_as_durations() -> None:
    """The outcome and heartbeat arrays are bound in binary, where psycopg refuses a list that
    mixes ints and floats: a retry delay, a lease or a run time given as an int still writes."""
    from django_jobs.transitions import Beat, heartbeat, write_outcomes

    first, second = _claimed("test.noop"), _claimed("test.noop")
    assert heartbeat(
        [Beat(first.id, first.execution_id, 30, 2), Beat(second.id, second.execution_id, 1.5)]
    ) == {
        first.id: False,
        second.id: False,
    }
    later = Outcome(
        first.id, first.execution_id, JobStatus.PENDING, delay=60, error_code="X", attempts=1, ran_for=3
    )
    soon = Outcome(second.id, second.execution_id, JobStatus.PENDING, delay=0.5, error_code="X", attempts=1)
    assert write_outcomes([later, soon]) == {first.id, second.id}
    assert dict(Job.objects.filter(pk__in=[first.id, second.id]).values_list("pk", "status")) == {
        first.id: JobStatus.PENDING,
        second.id: JobStatus.PENDING,
    }
    assert Job.objects.get(pk=first.id).available_at > Job.objects.get(pk=second.id).available_at
