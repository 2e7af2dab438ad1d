"""A pause and a resume reach every worker process within a second: two real `runjobs`
processes that poll only once a second (so anything faster came from a notification)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest

from django_jobs import enqueue, pause_queue, resume_queue
from django_jobs.models import Job, QueueEvent
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, listening_workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

#: Polls once a second, and a lease far longer than a job here: this is about pauses, and a
#: heartbeat a loaded machine delays past a sub-second lease would send a running job back to
#: its (paused) queue, where it rightly waits.
DEFAULT_POLL = {
    "DJANGO_JOBS_POLL_INTERVAL": "1.0",
    "DJANGO_JOBS_LEASE_TIMEOUT": "30.0",
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": "1.0",
}


@pytest.fixture
def two_workers(worker_env: dict[str, str]) -> Iterator[list[WorkerProcess]]:
    workers = [WorkerProcess({**worker_env, **DEFAULT_POLL}, "--concurrency", "2") for _ in range(2)]
    try:
        wait_for(lambda: listening_workers() == 2, what="both workers to LISTEN")
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def _statuses(jobs: list[Job]) -> set[str]:
    return set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True))


def test_pause_and_resume_reach_both_workers_and_running_jobs_finish(
    two_workers: list[WorkerProcess],
) -> None:
    running = [enqueue("test.long", {"seconds": 1.0}) for _ in range(2)]
    # Their handlers began: a claimed job may still wait in a worker's buffer for a moment, and a
    # pause gives such a job back (test_a_pause_stops_both_workers_within_a_second).
    started = BusinessRow.objects.filter(job_id__in=[j.id for j in running], key__startswith="started:")
    wait_for(lambda: started.count() == 2, what="the long jobs to start")

    pause_queue("default", actor="ops", reason="provider outage")
    waiting = [enqueue("test.noop", {}) for _ in range(8)]  # a paused queue still accepts jobs
    # The jobs that were running when the queue was paused finish normally.
    wait_for(lambda: _statuses(running) == {JobStatus.COMPLETED}, what="the running jobs to finish")
    time.sleep(1.5)  # longer than a poll: no worker claims from the paused queue, however it looks
    assert _statuses(waiting) == {JobStatus.PENDING}
    assert not Job.objects.filter(id__in=[j.id for j in waiting], attempts__gt=0).exists()

    resume_queue("default", actor="ops", reason="provider back")
    resumed_at = QueueEvent.objects.get(kind="resumed").created_at
    wait_for(lambda: _statuses(waiting) == {JobStatus.COMPLETED}, what="the waiting jobs to run")
    started = Job.objects.filter(id__in=[j.id for j in waiting]).values_list("started_at", flat=True)
    first = min(s for s in started if s is not None)
    # Woken by the resume's notification, not by the next poll (a second later).
    assert (first - resumed_at).total_seconds() < 0.5
    for worker in two_workers:
        assert worker.process.poll() is None, worker.output()


def test_a_pause_stops_both_workers_within_a_second(two_workers: list[WorkerProcess]) -> None:
    # A steady stream keeps both workers claiming; after the pause, nothing new starts.
    jobs = [enqueue("test.sleep", {"seconds": 0.05}) for _ in range(400)]
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() >= 10, what="the stream to flow")
    pause_queue("default", actor="ops", reason="incident")
    paused_at = QueueEvent.objects.get(kind="paused").created_at
    time.sleep(1.5)
    # Claims that ran while the pause committed may still start a job in the next moments; a
    # job prefetched before the pause is given back, not started.
    late = paused_at + dt.timedelta(seconds=0.3)
    assert not Job.objects.filter(id__in=[j.id for j in jobs], started_at__gt=late).exists()
    assert Job.objects.filter(status=JobStatus.PENDING).count() > 0
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 0  # running ones finished
    workers_seen = set(Job.objects.filter(status=JobStatus.COMPLETED).values_list("worker_id", flat=True))
    assert len(workers_seen) == 2  # both workers were taking jobs until the pause
