"""Heartbeats, deadlines, cancellation and checkpoints with a real worker in this process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import cancel
from testproject.testjobs.models import BusinessRow
from tests.db.inprocess import BackgroundWorker, run_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SHORT_LEASES = {
    "LEASE_TIMEOUT": 0.4,
    "HEARTBEAT_INTERVAL": 0.1,
    "REAPER_INTERVAL": 0.1,
    "POLL_INTERVAL": 0.02,
}


@pytest.fixture(autouse=True)
def short_leases() -> Iterator[None]:
    with override_settings(DJANGO_JOBS=SHORT_LEASES):
        yield


def test_heartbeat_keeps_a_long_job_owned_past_its_lease_timeout() -> None:
    job = enqueue("test.long", {"seconds": 1.2})  # three times the lease
    worker = run_worker(reap=True)
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1)
    assert not JobEvent.objects.filter(kind=EventKind.RECOVERED).exists()
    assert worker.stats.lost == 0


def test_deadline_stops_a_job_that_keeps_beating() -> None:
    job = enqueue("test.beating_forever", {})
    started = time.monotonic()
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.last_error_code == "TIMEOUT"
    assert time.monotonic() - started < 3
    time.sleep(0.25)
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.FAILED, 2, "TIMEOUT")


def test_heartbeat_never_covers_a_job_past_its_deadline() -> None:
    job = enqueue("test.runaway", {"seconds": 1.5}, max_attempts=1)
    worker = run_worker(reap=True)
    job.refresh_from_db()
    # The hung execution lost its lease at deadline + lease, the reaper failed the job (last
    # attempt); the pool declared the thread stuck and the burst worker did not wait for it.
    assert (job.status, job.last_error_code) == (JobStatus.FAILED, "LEASE_LOST")
    assert JobEvent.objects.get(job=job).kind == EventKind.RECOVERED
    assert worker.stats.stuck == 1
    # What the execution reported when it finally returned was refused.
    wait_for(lambda: BusinessRow.objects.filter(key__startswith="finished:").count() == 1, timeout=5)
    wait_for(lambda: worker.stats.lost == 1, timeout=2)
    assert Job.objects.get(id=job.id).status == JobStatus.FAILED


def test_running_job_is_cancelled_cooperatively() -> None:
    job = enqueue("test.long", {"seconds": 30})
    with BackgroundWorker():
        wait_for(lambda: BusinessRow.objects.filter(key__startswith="started:").exists())
        assert cancel(job.id, actor="ops", reason="wrong customer") == "requested"
        wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.CANCELLED, timeout=5)
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", "actor"))
    assert kinds == [(EventKind.CANCEL_REQUESTED, "ops"), (EventKind.CANCELLED, "worker")]
    assert not BusinessRow.objects.filter(key__startswith="finished:").exists()


def test_cancelled_pending_job_never_runs() -> None:
    job = enqueue("test.long", {"seconds": 0})
    assert cancel(job.id) == "cancelled"
    run_worker()
    assert not BusinessRow.objects.exists()
    assert Job.objects.get(id=job.id).status == JobStatus.CANCELLED


def test_checkpoint_and_progress_are_stored() -> None:
    job = enqueue("test.checkpointed", {"steps": 5, "pause": 0})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.checkpoint == {"next": 5}
    assert job.progress == {"done": 5, "total": 5}  # the final value is always written


def test_retry_starts_from_the_saved_checkpoint() -> None:
    job = enqueue("test.checkpointed", {"steps": 4, "pause": 0})
    Job.objects.filter(id=job.id).update(checkpoint={"next": 3})
    run_worker()
    rows = set(BusinessRow.objects.values_list("key", flat=True))
    assert rows == {f"step:{job.id}:3"}


def test_shutdown_releases_claimed_jobs_that_never_started() -> None:
    enqueue("test.long", {"seconds": 0.5})
    waiting = [enqueue("test.noop", {}) for _ in range(3)]
    with BackgroundWorker(concurrency=1, batch_size=10) as worker:
        wait_for(lambda: BusinessRow.objects.exists())
        worker._producer.claim_target = lambda: 4  # type: ignore[method-assign]  # force a prefetch
        wait_for(lambda: Job.objects.filter(status=JobStatus.RUNNING).count() == 4, timeout=3)
    for job in waiting:
        job.refresh_from_db()
        assert job.status in (JobStatus.PENDING, JobStatus.COMPLETED)
        if job.status == JobStatus.PENDING:
            assert job.attempts == 0  # a release does not count an attempt that never started
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def test_a_type_without_heartbeat_runs_on_its_lease_alone() -> None:
    quick = enqueue("test.lease_only", {"seconds": 0.05})
    slow = enqueue("test.lease_only", {"seconds": 1.0})  # overstays its 0.3 s lease
    worker = run_worker(reap=True, concurrency=2)
    assert Job.objects.get(id=quick.id).status == JobStatus.COMPLETED
    slow.refresh_from_db()
    assert (slow.status, slow.last_error_code) == (JobStatus.FAILED, "LEASE_LOST")
    assert worker.stats.lost == 1
