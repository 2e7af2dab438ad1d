"""A worker SIGKILLed around a marked external call: before the mark, the job is simply retried
(even for an on_lost="needs_review" type); after it, it is reconciled or parked for review.

Real `runjobs` processes, real SIGKILL, real PostgreSQL: the reaper of a second worker reads
the marks the first one committed.
"""

from __future__ import annotations

import signal

import pytest

from django_jobs import enqueue
from django_jobs.models import ExternalCall, Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import StartWorker, WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def reached(job: Job, point: str) -> bool:
    return BusinessRow.objects.filter(key__startswith=f"{point}:{job.id}:").exists()


def status(job: Job) -> str:
    return Job.objects.get(id=job.id).status


def charges(job: Job) -> int:
    return BusinessRow.objects.filter(key__startswith=f"provider_charge:{job.id}:").count()


def kill_the_worker_at(job: Job, point: str, start_worker: StartWorker) -> str:
    """Run ``job`` on a worker, SIGKILL it once the execution reached ``point``; return the
    lost execution's id."""
    first = start_worker()
    wait_for(lambda: reached(job, point), what=f"the execution to reach {point}")
    lost = str(Job.objects.get(id=job.id).execution_id)
    first.kill()
    assert status(job) == JobStatus.RUNNING  # SIGKILL left it running under the dead worker
    return lost


def stop(worker: WorkerProcess) -> None:
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_killed_before_the_mark_the_job_is_retried_though_its_type_says_needs_review(
    start_worker: StartWorker,
) -> None:
    job = enqueue("test.marked_charge", {"hang": "before_call"})
    lost = kill_the_worker_at(job, "before_call", start_worker)
    assert not ExternalCall.objects.filter(job=job).exists()

    second = start_worker()
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="recovery and a plain retry")
    stop(second)
    job.refresh_from_db()
    assert job.attempts == 2 and charges(job) == 1
    recovered = JobEvent.objects.get(job=job, kind=EventKind.RECOVERED)
    assert (str(recovered.execution_id), recovered.to_status, recovered.error_code) == (
        lost, "pending", "LOST_BEFORE_CALL",
    )  # fmt: skip
    assert "never reached the provider" in (recovered.error or "")
    (call,) = ExternalCall.objects.filter(job=job)  # the retry's own, ended
    assert call.execution_id == job.execution_id and call.ended_at is not None


def test_killed_after_the_mark_a_type_without_reconcile_is_parked_for_review(
    start_worker: StartWorker,
) -> None:
    job = enqueue("test.marked_charge", {"hang": "in_call"})
    lost = kill_the_worker_at(job, "in_call", start_worker)

    second = start_worker()
    wait_for(lambda: status(job) == JobStatus.NEEDS_REVIEW, what="the job to be parked")
    stop(second)
    job.refresh_from_db()
    assert (job.attempts, job.last_error_code) == (1, "LEASE_LOST") and charges(job) == 0
    assert "after it marked external call 'charge'" in (job.last_error or "")
    (call,) = ExternalCall.objects.filter(job=job)
    assert (str(call.execution_id), call.name, call.ended_at) == (lost, "charge", None)


def test_killed_after_the_mark_a_type_with_reconcile_asks_before_charging_again(
    start_worker: StartWorker,
) -> None:
    job = enqueue("test.marked_reconciled", {"hang": "charged"})  # the charge happened, then the kill
    kill_the_worker_at(job, "charged", start_worker)
    assert charges(job) == 1

    second = start_worker()
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="recovery and reconciliation")
    stop(second)
    assert charges(job) == 1  # reconcile said it was done: the handler did not charge again
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", "error_code"))
    assert kinds == [(EventKind.RECOVERED, "LEASE_LOST"), (EventKind.RECONCILED, None)]
