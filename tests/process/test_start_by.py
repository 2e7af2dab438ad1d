"""A job past its start-by deadline never runs, whichever pool a real `runjobs` runs: the claim
may still hand it over (it does not read deadlines), and the start ends it ``cancelled``, code
``EXPIRED``, instead of running its handler.

The worker's reaper runs one pass at start and then not for minutes: the job below is ended by
the start path of the worker's slot, not by a reaper's pass.
"""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db import transaction
from django.db.models.functions import Now

from django_jobs import enqueue
from django_jobs.errors import ErrorCode
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NO_REAPER_PASSES = {"DJANGO_JOBS_REAPER_INTERVAL": "600"}


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_claimed_job_past_its_deadline_never_runs_in_either_pool(
    pool: str, worker_env: dict[str, str]
) -> None:
    worker = WorkerProcess({**worker_env, **NO_REAPER_PASSES}, "--pool", pool, "--concurrency", "1")
    try:
        warm = enqueue("test.record", {"key": "warm-up"})
        wait_for(
            lambda: Job.objects.get(id=warm.id).status == JobStatus.COMPLETED, timeout=60, what="warm-up"
        )
        with transaction.atomic():  # written past its deadline (test data), then claimed at once
            late = enqueue("test.record", {"key": "late"}, expires_in=60)
            Job.objects.filter(id=late.id).update(start_by=Now() - dt.timedelta(seconds=1))
            timely = enqueue("test.record", {"key": "timely"}, expires_in=60)
        wait_for(
            lambda: (
                Job.objects.get(id=late.id).status != JobStatus.PENDING
                and Job.objects.get(id=timely.id).status == JobStatus.COMPLETED
            ),
            timeout=30,
            what="both jobs taken by the worker",
        )
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
        output = worker.output()
    finally:
        worker.stop()
    late.refresh_from_db()
    assert (late.status, late.last_error_code, late.attempts) == (JobStatus.CANCELLED, ErrorCode.EXPIRED, 0)
    assert not BusinessRow.objects.filter(key="late").exists(), "the handler of an expired job ran"
    assert BusinessRow.objects.filter(key="timely").exists()
    event = JobEvent.objects.get(job_id=late.id)
    assert (event.kind, event.actor, event.from_status) == (EventKind.EXPIRED, "worker", JobStatus.RUNNING)
    assert "job expired: not started by its start-by deadline" in output
