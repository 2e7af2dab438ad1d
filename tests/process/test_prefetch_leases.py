"""A prefetched job whose lease lapsed while it waited for a slot is given back, never started:
the reaper may have handed it to another execution by then.

A real `runjobs` with one slot, a short lease and a buffer that waits longer than the lease
(10 × PREFETCH_SECONDS): the slot is busy with a long job while the jobs prefetched behind it
outlive their leases, the reaper takes them back, and the slot frees up before the main
thread's own check for overdue buffered jobs.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHORT_LEASE_LONG_BUFFER = {
    "DJANGO_JOBS_LEASE_TIMEOUT": "0.4",
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": "0.1",
    "DJANGO_JOBS_REAPER_INTERVAL": "0.1",
    "DJANGO_JOBS_PREFETCH_SECONDS": "0.2",  # the main thread gives buffered jobs back after 2 s
}


def _statuses(jobs: list[Job]) -> set[str]:
    return set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True))


def test_a_prefetched_job_whose_lease_lapsed_is_given_back_not_started(start_worker: StartWorker) -> None:
    worker = start_worker("--concurrency", "1", env=SHORT_LEASE_LONG_BUFFER)
    # Short jobs first: the worker learns that jobs are short, and prefetches from now on.
    warm_up = [enqueue("test.noop", {}) for _ in range(5)]
    wait_for(lambda: _statuses(warm_up) == {JobStatus.COMPLETED}, what="the warm-up jobs")

    with transaction.atomic():  # one commit, one notification: one claim takes them all
        busy = enqueue("test.long", {"seconds": 1.2}, priority=10)  # the one slot, for 3 leases
        behind = [enqueue("test.long", {"seconds": 0.01}) for _ in range(3)]
    wait_for(lambda: _statuses([busy, *behind]) == {JobStatus.COMPLETED}, timeout=30, what="every job")

    for job in Job.objects.filter(id__in=[j.id for j in behind]):
        marks = BusinessRow.objects.filter(key__startswith=f"started:{job.id}:")
        started = set(marks.values_list("execution_id", flat=True))
        # Only the execution that completed the job ran its handler: the one whose lease had
        # lapsed in the buffer never began.
        assert started == {job.execution_id}, (job.id, started, worker.output()[-3000:])
    assert "giving back a prefetched job whose lease is lapsing" in worker.output()
