"""``django_jobs.testing.run_one()`` in a plain ``TestCase``: the worker's claim, executor and
outcome writer, on the test's thread and inside the test's transaction."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test import TestCase, TransactionTestCase

from django_jobs import enqueue
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent, ProcessedEffect
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_one, run_until_settled
from testproject.testjobs.jobs import SimulatedCrash
from testproject.testjobs.models import BusinessRow, EffectLog


def time_passes(job: Job, *, lease: bool = False) -> None:
    """Inside a test's transaction the database's clock stands still: move the job's times
    back instead, as the seconds of a backoff or a lease would pass."""
    past = Now() - dt.timedelta(hours=1)
    changes: dict[str, Any] = {"lease_expires_at": past} if lease else {"available_at": past}
    Job.objects.filter(id=job.id).update(**changes)


class RunOneInATestCase(TestCase):
    def test_a_job_that_succeeds_is_completed_in_the_tests_transaction(self) -> None:
        job = enqueue("test.record", {"key": "invoice:1"})
        ran = run_one()
        assert ran is not None and ran.id == job.id
        assert (ran.status, ran.attempts) == (JobStatus.COMPLETED, 1)
        assert ran.completed_at is not None and ran.execution_id is not None
        assert BusinessRow.objects.get(key="invoice:1").execution_id == ran.execution_id
        assert connection.in_atomic_block  # all of it inside the test's transaction
        assert run_one() is None  # nothing left to claim

    def test_a_retryable_error_schedules_a_retry_with_the_workers_decision(self) -> None:
        job = enqueue("test.flaky", {"succeed_on": 2})
        ran = run_one()
        assert ran is not None
        assert (ran.status, ran.attempts, ran.last_error_code) == (JobStatus.PENDING, 1, "PROVIDER_5XX")
        assert ran.available_at > ran.started_at  # the backoff, by the database's clock
        event = JobEvent.objects.get(job=job)
        assert (event.kind, event.attempt, event.actor) == (EventKind.RETRY_SCHEDULED, 1, "worker")
        assert run_one() is None  # not due yet
        time_passes(job)
        ran = run_one()
        assert ran is not None and (ran.status, ran.attempts) == (JobStatus.COMPLETED, 2)

    def test_a_permanent_error_fails_the_job_at_once(self) -> None:
        job = enqueue("test.permanent", {})
        ran = run_one()
        assert ran is not None and ran.id == job.id
        assert (ran.status, ran.attempts, ran.last_error_code) == (JobStatus.FAILED, 1, "ENTITY_NOT_FOUND")
        assert "the account does not exist" in (ran.last_error or "")
        assert JobEvent.objects.get(job=job).kind == EventKind.FAILED

    def test_an_effect_block_happens_once_across_a_crash_and_the_retry(self) -> None:
        job = enqueue("test.invoice", {"order": 7, "crash_plan": ["after_effect"], "crash_by": "exception"})
        with pytest.raises(SimulatedCrash):
            run_one()  # the effect committed (in the test's transaction), then the "crash"
        assert EffectLog.objects.filter(key="invoice:order:7").count() == 1
        assert ProcessedEffect.objects.filter(key="invoice:order:7", job_id=job.id).exists()
        time_passes(job, lease=True)
        assert reaper.recover() == {"pending": 1}
        time_passes(job)
        ran = run_one()
        assert ran is not None and (ran.status, ran.attempts) == (JobStatus.COMPLETED, 2)
        assert EffectLog.objects.filter(key="invoice:order:7").count() == 1  # not twice

    def test_system_exit_propagates_writes_nothing_and_the_reaper_recovers_the_job(self) -> None:
        job = enqueue("test.hostile", {"kind": "system_exit"})
        with pytest.raises(SystemExit):
            run_one()
        job.refresh_from_db()
        claimed = (job.status, job.attempts, job.last_error_code, job.execution_id)
        assert claimed[:3] == (JobStatus.RUNNING, 1, None) and job.execution_id is not None
        assert not JobEvent.objects.filter(job=job).exists()  # no outcome: the lease decides
        assert reaper.recover() == {}  # its lease has not expired yet
        time_passes(job, lease=True)
        assert reaper.recover() == {"pending": 1}
        job.refresh_from_db()
        assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 1, "LEASE_LOST")
        recovered = JobEvent.objects.get(job=job)
        assert (recovered.kind, recovered.execution_id) == (EventKind.RECOVERED, claimed[3])

    def test_a_database_error_in_the_handler_rolls_back_its_writes_and_the_outcome_is_written(self) -> None:
        BusinessRow.objects.create(key="taken", job_id=0, execution_id="00000000-0000-0000-0000-000000000000")
        job = enqueue("test.record", {"key": "taken"})  # its INSERT violates UNIQUE
        ran = run_one()
        assert ran is not None and ran.id == job.id
        assert (ran.status, ran.attempts, ran.last_error_code) == (JobStatus.PENDING, 1, "UNKNOWN")
        assert "IntegrityError" in (ran.last_error or "")
        assert BusinessRow.objects.filter(key="taken").count() == 1  # the test can go on

    def test_run_one_takes_the_next_claimable_job_of_the_queues_and_types_asked(self) -> None:
        enqueue("test.noop", {}, queue="emails", priority=5)
        low = enqueue("test.record", {"key": "low"}, priority=-5)
        high = enqueue("test.record", {"key": "high"}, priority=5)
        assert list(Job.objects.claimable(types=["test.record"])) == [high, low]
        ran = run_one(types=["test.record"])
        assert ran is not None and ran.id == high.id
        assert run_one(queues=["reports"]) is None
        ran = run_one(queues=["emails"])
        assert ran is not None and (ran.type, ran.status) == ("test.noop", JobStatus.COMPLETED)

    def test_run_until_settled_in_thread_runs_jobs_until_none_is_left(self) -> None:
        jobs = [enqueue("test.record", {"key": f"k{n}"}) for n in range(3)]
        run_until_settled(in_thread=True)
        assert set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True)) == {
            JobStatus.COMPLETED
        }

    def test_run_until_settled_in_thread_says_why_a_retry_can_never_come_in_a_test_transaction(
        self,
    ) -> None:
        enqueue("test.flaky", {"succeed_on": 2})
        with pytest.raises(TimeoutError, match="clock stands still inside this test's transaction"):
            run_until_settled(in_thread=True, timeout=5)


class RunOneWithCommits(TransactionTestCase):
    def test_outside_a_transaction_each_write_commits_and_retries_are_waited_for(self) -> None:
        with transaction.atomic():
            job = enqueue("test.flaky", {"succeed_on": 2})
        run_until_settled(in_thread=True, timeout=10)
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)
        assert JobEvent.objects.get(job=job).kind == EventKind.RETRY_SCHEDULED
