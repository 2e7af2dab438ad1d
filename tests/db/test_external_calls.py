"""Marks before external calls: committed before the call, guarded like every write of an
execution, and read by the reaper to tell an execution that never reached the provider (a
plain retry) from one that may have (reconciled, or parked for review)."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.utils import timezone

from django_jobs import LeaseLost, enqueue, transitions
from django_jobs.maintenance import reaper
from django_jobs.maintenance.reaper import decide_recovery
from django_jobs.models import ExternalCall, Job, JobEvent
from django_jobs.runtime.context import JobContext
from django_jobs.runtime.lease import Lease
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_jobs, run_until_settled
from testproject.testjobs.models import BusinessRow
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def second_connection() -> psycopg.Connection[tuple[object, ...]]:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    )


def stale_marked_job(**fields: object) -> Job:
    """A running job of a type that marks its calls, whose worker is gone."""
    job: Job = JobFactory(running_stale=True, type="test.marked_charge", **fields)
    assert job.on_lost_in_call == "needs_review"  # copied from the type, as enqueue() does
    return job


def mark(job: Job, name: str = "charge", execution: uuid.UUID | None = None) -> ExternalCall:
    return ExternalCall.objects.create(job=job, execution_id=execution or job.execution_id, name=name)


# ---- the mark itself --------------------------------------------------------------------------


def test_the_mark_is_committed_before_the_block_runs_and_its_end_after() -> None:
    seen_in_call: list[tuple[object, ...]] = []
    job = enqueue("test.marked_charge", {})

    from testproject.testjobs import jobs

    original = jobs._reach

    def reach(ctx: JobContext, payload: dict[str, object], point: str) -> None:
        if point == "in_call":  # look from another connection, as the reaper would
            with second_connection() as other:
                seen_in_call.extend(
                    other.execute(
                        "SELECT name, execution_id, ended_at FROM django_jobs_externalcall WHERE job_id = %s",
                        [ctx.job_id],
                    ).fetchall()
                )
        original(ctx, payload, point)

    jobs._reach = reach  # type: ignore[assignment]
    try:
        run_jobs()
    finally:
        jobs._reach = original  # type: ignore[assignment]
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert seen_in_call == [("charge", job.execution_id, None)]
    call = ExternalCall.objects.get(job=job)
    assert call.ended_at is not None and call.started_at <= call.ended_at and call.exception is None


def test_a_block_that_raises_records_the_exception_class_only() -> None:
    job = enqueue("test.marked_charge", {"fail_in_call": "PROVIDER_5XX"})
    run_jobs()
    call = ExternalCall.objects.get(job=job)
    assert call.exception == "django_jobs.RetryableError" and call.ended_at is not None


def test_an_undeclared_call_is_refused_before_anything_is_written() -> None:
    job = enqueue("test.marked_charge", {"undeclared": True})
    run_jobs()
    job.refresh_from_db()
    assert "external call 'transfer' is not declared by job type 'test.marked_charge'" in (
        job.last_error or ""
    )
    assert not ExternalCall.objects.filter(job=job).exists()


def test_an_execution_that_lost_its_job_cannot_mark_nor_call() -> None:
    job = JobFactory(running=True, type="test.marked_charge")
    zombie = uuid.uuid4()  # an execution the job no longer belongs to
    lease = Lease(job.id, zombie, 60.0)
    ctx = JobContext(
        job_id=job.id, type=job.type, queue=job.queue, attempt=1, max_attempts=5, execution_id=zombie,
        lease=lease, external_calls=("charge",),
    )  # fmt: skip
    called = []
    with pytest.raises(LeaseLost), ctx.external_call("charge"):
        called.append(True)
    assert called == [] and lease.lost and not lease.marked_call
    assert not ExternalCall.objects.exists()


def test_a_mark_waits_for_a_recovery_in_progress_and_is_then_refused() -> None:
    job = stale_marked_job()
    result: list[int | None] = []

    def mark_from_the_lost_execution() -> None:
        try:
            result.append(transitions.mark_call(job.id, job.execution_id, "charge"))
        finally:
            connections.close_all()

    with transaction.atomic():
        (recovery,) = transitions.recover_expired(decide_recovery, 10)  # locks the row, moves it
        marker = threading.Thread(target=mark_from_the_lost_execution)
        marker.start()
        wait_until_blocked_on_a_lock()
        assert result == []  # still waiting for the recovery to commit
    marker.join(timeout=10)
    assert result == [None]  # refused: the execution must not call
    assert recovery.status == JobStatus.PENDING and not ExternalCall.objects.exists()


def test_a_recovery_waits_for_a_mark_in_progress_and_then_sees_it() -> None:
    job = stale_marked_job()
    with second_connection() as other, other.transaction():
        other.execute(
            transitions.calls._MARK, {"job": job.id, "execution": job.execution_id, "name": "charge"}
        )
        assert reaper.recover() == {}  # the row is locked by the mark: skipped, not decided blind
    assert reaper.recover() == {"needs_review": 1}


def wait_until_blocked_on_a_lock(timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            # Inside a transaction the activity view is read once and kept: read it afresh.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        assert time.monotonic() < deadline, "the mark never waited for the recovery's lock"
        time.sleep(0.02)


# ---- what the reaper does with them -----------------------------------------------------------


def test_lost_before_any_mark_is_a_plain_retry_even_for_a_needs_review_type() -> None:
    job = stale_marked_job(attempts=1)
    mark(job, execution=uuid.uuid4())  # a mark of an earlier execution does not count
    (recovered,) = reaper.run_once().jobs
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 1, "LOST_BEFORE_CALL")
    assert recovered.status == "pending" and recovered.marked_call is None
    assert "before it marked any external call" in recovered.why


def test_lost_after_a_mark_is_parked_for_review() -> None:
    job = stale_marked_job(attempts=1)
    mark(job, "refund")
    mark(job, "charge")
    (recovered,) = reaper.run_once().jobs
    job.refresh_from_db()
    assert (job.status, job.last_error_code) == (JobStatus.NEEDS_REVIEW, "LEASE_LOST")
    assert recovered.marked_call == "charge"  # the last one it marked
    assert "after it marked external call 'charge'" in (job.last_error or "")
    assert JobEvent.objects.get(job=job).to_status == JobStatus.NEEDS_REVIEW


def test_lost_after_a_mark_of_a_retry_type_with_reconcile_is_reconciled_first() -> None:
    job = JobFactory(running_stale=True, type="test.marked_reconciled", attempts=1)
    assert (job.on_lost, job.on_lost_in_call) == ("reconcile", "reconcile")
    mark(job)
    BusinessRow.objects.create(
        key=f"provider_charge:{job.id}:1", job_id=job.id, execution_id=job.execution_id
    )
    assert reaper.recover() == {"pending": 1}
    job.refresh_from_db()
    assert job.last_error_code == "LEASE_LOST"  # ambiguous: the next execution asks first
    Job.objects.filter(id=job.id).update(available_at=timezone.now())  # skip the backoff wait
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert JobEvent.objects.filter(job=job, kind=EventKind.RECONCILED).exists()
    assert BusinessRow.objects.filter(key__startswith=f"provider_charge:{job.id}:").count() == 1  # not twice


def test_lost_before_a_mark_while_the_previous_end_was_ambiguous_keeps_the_doubt() -> None:
    job = JobFactory(
        running_stale=True, type="test.marked_reconciled", attempts=2, last_error_code="NETWORK_TIMEOUT"
    )
    assert reaper.recover() == {"pending": 1}
    job.refresh_from_db()
    # It may have been lost while reconciling the previous attempt: the next one reconciles again.
    assert job.last_error_code == "LEASE_LOST"


def test_types_that_mark_no_call_keep_their_on_lost() -> None:
    unsafe = JobFactory(running_stale=True, type="test.unsafe")
    assert unsafe.on_lost_in_call is None
    assert reaper.recover() == {"needs_review": 1}


def test_retention_prunes_marks_with_their_job() -> None:
    job = JobFactory(completed=True, type="test.marked_charge")
    mark(job, execution=uuid.uuid4())
    Job.objects.filter(id=job.id).update(finished_at=timezone.now() - timezone.timedelta(days=400))
    assert reaper.prune() == {"completed": 1}
    assert not ExternalCall.objects.exists()


# ---- what the executor does with them ---------------------------------------------------------


def test_an_ambiguous_error_before_any_mark_is_retried_even_for_a_needs_review_type() -> None:
    marked = enqueue("test.marked_charge", {"fail_before_call": "NETWORK_TIMEOUT"})
    unmarked = enqueue("test.unsafe_send", {})  # the same error, a type that marks nothing
    run_until_settled()
    marked.refresh_from_db()
    unmarked.refresh_from_db()
    assert (marked.status, marked.attempts) == (JobStatus.COMPLETED, 2)
    assert JobEvent.objects.get(job=marked).kind == EventKind.RETRY_SCHEDULED
    assert unmarked.status == JobStatus.NEEDS_REVIEW


def test_an_ambiguous_error_inside_the_call_is_parked_and_outside_it_is_retried() -> None:
    inside = enqueue("test.marked_charge", {"fail_in_call": "NETWORK_TIMEOUT"})
    after = enqueue("test.marked_charge", {"fail_after_call": "PROVIDER_5XX"})
    run_until_settled()
    inside.refresh_from_db()
    after.refresh_from_db()
    assert (inside.status, inside.last_error_code) == (JobStatus.NEEDS_REVIEW, "NETWORK_TIMEOUT")
    assert "it marked an external call" in (JobEvent.objects.get(job=inside).reason or "")
    # A plain error after the call is retried as before: a mark matters when the end is ambiguous.
    assert (after.status, after.attempts) == (JobStatus.COMPLETED, 2)
