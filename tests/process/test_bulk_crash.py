"""A bulk operation's worker dies or freezes mid-way; another takes its job over and finishes
the operation, and no job is acted on twice.

Real ``runjobs`` processes, real SIGKILL and SIGSTOP, real PostgreSQL: the operation moves at
20 jobs a second (a batch of 20 each second), so the signal lands between or inside batches.
"""

from __future__ import annotations

import signal
import uuid

import psycopg
import pytest
from django.db import connection

import django_jobs
from django_jobs import JobFilter
from django_jobs.console import bulk_runner
from django_jobs.models import BulkOperation, BulkState, Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.factories import JobFactory
from tests.process.workers import StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOBS = 100
PACE = 20
CODE = "PROVIDER_DOWN"


@pytest.fixture
def operation() -> BulkOperation:
    for _ in range(JOBS):
        JobFactory(failed=True, queue="payments", last_error_code=CODE, execution_id=uuid.uuid4())
    return django_jobs.retry_matching(JobFilter(code=CODE), reason="provider back", actor="ops", pace=PACE)


def progress(operation: BulkOperation) -> BulkOperation:
    return BulkOperation.objects.get(id=operation.id)


def acted_on_each_job_once(operation: BulkOperation) -> None:
    final = progress(operation)
    assert (final.state, final.done, final.skipped, final.total) == (BulkState.DONE, JOBS, 0, JOBS)
    retried = Job.objects.filter(last_error_code=CODE)
    assert set(retried.values_list("status", "manual_retries")) == {(JobStatus.PENDING, 1)}
    events = JobEvent.objects.filter(kind=EventKind.MANUAL_RETRY)
    assert events.count() == JOBS
    assert set(events.values_list("details__operation", flat=True)) == {operation.id}
    assert sorted(events.values_list("job_id", flat=True)) == sorted(retried.values_list("id", flat=True))


def test_a_killed_operation_worker_is_taken_over_and_no_job_is_retried_twice(
    start_worker: StartWorker, operation: BulkOperation
) -> None:
    first = start_worker("--queue", "default")
    wait_for(lambda: 0 < progress(operation).done < JOBS - PACE, what="the operation to be under way")
    first.kill()
    left_at = progress(operation).done
    assert progress(operation).state == BulkState.RUNNING

    second = start_worker("--queue", "default")
    wait_for(lambda: progress(operation).state == BulkState.DONE, timeout=30, what="the operation to finish")
    second.send(signal.SIGTERM)
    assert second.wait() == 0
    acted_on_each_job_once(operation)
    runner = Job.objects.get(id=operation.job_id)
    assert runner.status == JobStatus.COMPLETED and runner.attempts == 2
    assert JobEvent.objects.filter(job=runner, kind=EventKind.RECOVERED).exists()
    assert left_at < JOBS


def test_a_worker_frozen_inside_a_batch_loses_it_and_the_rescuer_finishes(
    start_worker: StartWorker, operation: BulkOperation
) -> None:
    # The test holds one job of the second batch locked: the worker's batch waits for it with
    # the operation's row locked, and is frozen there.
    held = Job.objects.filter(last_error_code=CODE).order_by("id").values_list("id", flat=True)[PACE + 5]
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"]
    ) as holder:
        holder.execute("SELECT 1 FROM django_jobs_job WHERE id = %s FOR UPDATE", [held])
        zombie = start_worker("--queue", "default")
        wait_for(lambda: waits_for_a_lock(), timeout=20, what="the second batch to wait")
        zombie.send(signal.SIGSTOP)
        holder.rollback()
    assert progress(operation).done == PACE

    rescuer = start_worker("--queue", "default")
    wait_for(
        lambda: progress(operation).state == BulkState.DONE,
        timeout=bulk_runner.BATCH_IDLE_LIMIT + 30,
        what="the rescuer to finish the operation",
    )
    zombie.send(signal.SIGCONT)
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait() == 0
    zombie.send(signal.SIGTERM)
    zombie.wait()
    acted_on_each_job_once(operation)


def waits_for_a_lock() -> bool:
    """A session of the test database waits for a row lock (the job the test holds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return bool(cursor.fetchone()[0])
