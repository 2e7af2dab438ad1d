"""Workers die, freeze and get deployed over; every job still ends where it should.

Real `runjobs` processes, real signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), real PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Callable

import pytest

from django_jobs import enqueue
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.runtime.worker import EXIT_MARGIN
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def started(job: Job) -> int:
    return BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").count()


def status(job: Job) -> str:
    return Job.objects.get(id=job.id).status


def test_5_job_of_a_killed_worker_is_recovered_and_completed_by_another(start_worker: StartWorker) -> None:
    job = enqueue("test.long", {"seconds": 1.5})
    first = start_worker()
    wait_for(lambda: started(job) == 1, what="the first execution to start")
    lost_execution = Job.objects.get(id=job.id).execution_id
    first.kill()
    assert status(job) == JobStatus.RUNNING  # SIGKILL left it running under the dead worker

    second = start_worker()
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="recovery and completion")
    second.send(signal.SIGTERM)
    assert second.wait() == 0

    job.refresh_from_db()
    assert job.attempts == 2 and job.execution_id != lost_execution
    recovered = JobEvent.objects.get(job=job, kind=EventKind.RECOVERED)
    assert (recovered.execution_id, recovered.to_status) == (lost_execution, "pending")
    executions = set(BusinessRow.objects.filter(job_id=job.id).values_list("key", "execution_id"))
    assert {key.split(":")[0] for key, _ in executions} == {"started", "finished"}
    assert {e for _, e in executions} == {lost_execution, job.execution_id}  # both executions left a trace
    assert BusinessRow.objects.get(key__startswith="finished:").execution_id == job.execution_id


def test_frozen_worker_cannot_overwrite_the_job_after_it_was_handed_over(start_worker: StartWorker) -> None:
    job = enqueue("test.long", {"seconds": 1.5})
    zombie = start_worker()
    wait_for(lambda: started(job) == 1, what="the first execution to start")
    zombie_execution = Job.objects.get(id=job.id).execution_id
    zombie.send(signal.SIGSTOP)  # frozen mid-job: no heartbeat, no progress, no outcome

    rescuer = start_worker()
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="the job to be completed by the rescuer")
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait() == 0
    job.refresh_from_db()
    final = (job.status, job.execution_id, job.attempts, job.completed_at, job.worker_id)
    events_before = JobEvent.objects.filter(job=job).count()

    zombie.send(signal.SIGCONT)
    wait_for(lambda: "lease lost" in zombie.output(), what="the zombie to learn it lost its lease")
    zombie.send(signal.SIGTERM)
    assert zombie.wait() == 0

    job.refresh_from_db()
    assert (job.status, job.execution_id, job.attempts, job.completed_at, job.worker_id) == final
    assert job.execution_id != zombie_execution
    assert JobEvent.objects.filter(job=job).count() == events_before
    # The job system refused every write of the zombie. A write the handler makes to its own
    # tables after waking up is beyond its reach: that is what processed effects and business
    # constraints are for (docs/idempotency.md).


def test_8_sigterm_stops_claiming_and_lets_the_running_job_finish(start_worker: StartWorker) -> None:
    running = enqueue("test.long", {"seconds": 1.0}, priority=10)
    queued = [enqueue("test.noop", {}) for _ in range(5)]
    worker = start_worker("--concurrency", "1")
    wait_for(lambda: started(running) == 1, what="the long job to start")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert status(running) == JobStatus.COMPLETED
    assert BusinessRow.objects.filter(key__startswith="finished:").count() == 1
    for job in queued:
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)  # never claimed after the signal
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def _left_to_its_lease(job: Job, db_now: Callable[[], object]) -> None:
    """The worker exited with the job still running: never given back while its thread may run
    (two executions would overlap); its lease, cut short, expires and the reaper decides."""
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.attempts == 1
    assert job.lease_expires_at <= db_now() + dt.timedelta(seconds=EXIT_MARGIN)  # type: ignore[operator]
    wait_for(lambda: Job.objects.stale().filter(id=job.id).exists(), timeout=EXIT_MARGIN + 2)
    assert reaper.recover() == {"pending": 1}
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 1, "LEASE_LOST")
    assert JobEvent.objects.get(job=job).kind == EventKind.RECOVERED
    assert not BusinessRow.objects.filter(key__startswith="finished:").exists()


def test_grace_period_exceeded_leaves_the_job_to_its_shortened_lease(
    start_worker: StartWorker, db_now: Callable[[], object]
) -> None:
    job = enqueue("test.long", {"seconds": 60})
    worker = start_worker("--grace", "0.5")
    wait_for(lambda: started(job) == 1, what="the job to start")
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=10) == 0
    assert "left to their leases" in worker.output()
    _left_to_its_lease(job, db_now)


def test_second_signal_exits_at_once_and_leaves_running_jobs_to_their_leases(
    start_worker: StartWorker, db_now: Callable[[], object]
) -> None:
    job = enqueue("test.long", {"seconds": 60})
    worker = start_worker("--grace", "60")
    wait_for(lambda: started(job) == 1, what="the job to start")
    worker.send(signal.SIGTERM)
    wait_for(lambda: "no new claims" in worker.output(), what="the first signal to be handled")
    worker.send(signal.SIGINT)
    try:
        assert worker.wait(timeout=10) == 0
    except Exception:
        print(worker.output()[-3000:])  # what the worker was doing when it did not exit
        raise
    _left_to_its_lease(job, db_now)


def test_checkpointed_job_resumes_after_kill_9(start_worker: StartWorker) -> None:
    job = enqueue("test.checkpointed", {"steps": 30, "pause": 0.1})
    steps = BusinessRow.objects.filter(key__startswith=f"step:{job.id}:")
    first = start_worker()
    wait_for(lambda: steps.count() >= 8, what="a few steps to be done")
    first.kill()
    done_before_crash = steps.count()

    second = start_worker()
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="the resumed job to complete")
    second.send(signal.SIGTERM)
    second.wait()

    job.refresh_from_db()
    assert sorted(int(k.rsplit(":", 1)[1]) for k in steps.values_list("key", flat=True)) == list(range(30))
    redone = steps.filter(execution_id=job.execution_id).count()
    assert redone <= 30 - done_before_crash + 1  # resumed from the checkpoint, not from step 0
    assert job.checkpoint == {"next": 30} and job.attempts == 2
