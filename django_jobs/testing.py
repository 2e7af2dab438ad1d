"""Helpers for your own tests: run the queued jobs now, in this process, with the real worker."""

from __future__ import annotations

import time
from collections.abc import Sequence

from django.db.models import F, Min, QuerySet
from django.db.models.functions import Now

from django_jobs.conf import jobs_settings
from django_jobs.models import Job
from django_jobs.states import ACTIVE_STATUSES, JobStatus
from django_jobs.worker import Worker, WorkerStats


def run_jobs(queues: Sequence[str] | None = None, concurrency: int = 1) -> WorkerStats:
    """Run a burst worker: every job claimable now is executed; retries scheduled later wait.

    The worker's threads use their own connections, so use a transactional test
    (``@pytest.mark.django_db(transaction=True)`` or ``TransactionTestCase``).
    """
    worker = Worker(queues=queues, concurrency=concurrency, burst=True, grace=5.0)
    worker.run()
    return worker.stats


def run_until_settled(
    queues: Sequence[str] | None = None, concurrency: int = 1, timeout: float = 30.0
) -> None:
    """Run burst workers until no job is pending or running, waiting out retry backoffs.

    Raises ``TimeoutError`` if jobs are still active after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    active = Job.objects.using(jobs_settings.DATABASE).filter(status__in=ACTIVE_STATUSES)
    if queues:
        active = active.filter(queue__in=queues)
    while active.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{active.count()} job(s) still active after {timeout}s")
        run_jobs(queues, concurrency)
        wait = _seconds_until_next_due(active)
        if wait > 0:
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))


def _seconds_until_next_due(active: QuerySet[Job]) -> float:
    # Database time: the backoff was counted from the database's now(), not ours.
    wait = active.filter(status=JobStatus.PENDING).aggregate(wait=Min(F("available_at") - Now()))["wait"]
    return wait.total_seconds() if wait is not None else 0.0
