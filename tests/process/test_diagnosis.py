"""A diagnosis of jobs around a real `runjobs` process: no worker yet, running on it while it
lives, its worker silent once it is killed, and `checkjobs` seeing the same."""

from __future__ import annotations

import signal
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.models import Job, LiveWorker
from django_jobs.observe.diagnosis import Reason, explain
from django_jobs.states import JobStatus
from tests.process.conftest import StartWorker
from tests.process.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_job_waits_for_a_worker_runs_on_it_and_is_seen_lost_when_the_worker_dies(
    start_worker: StartWorker,
) -> None:
    job = enqueue("test.sleep", {"seconds": 30}, queue="diag")
    assert explain(job.id).reason == Reason.NO_WORKER
    with pytest.raises(SystemExit) as exited:
        call_command("checkjobs", stdout=StringIO())
    assert exited.value.code == 1  # due jobs, and nobody serves their queue

    worker = start_worker("--queue", "diag")
    wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.RUNNING, what="the job to start")
    wait_for(lambda: LiveWorker.objects.filter(pid=worker.pid).exists(), what="the worker's first report")
    row = LiveWorker.objects.get(pid=worker.pid)
    assert row.job_types is not None and row.job_types["test.versioned"] == 3  # what its code runs
    why = explain(job.id)
    assert why.reason == Reason.RUNNING, why
    assert f"running on worker {row.worker_id}, alive" in why.sentence

    worker.send(signal.SIGSTOP)  # frozen: no heartbeat, no report, no reaper
    # Read with the workers' settings: silent after 3 heartbeat intervals of 0.2 s.
    with override_settings(DJANGO_JOBS={**settings.DJANGO_JOBS, "HEARTBEAT_INTERVAL": 0.2}):
        wait_for(lambda: explain(job.id).reason == Reason.RUNNING_LEASE_EXPIRED, what="its lease to expire")
        wait_for(lambda: "(silent for" in explain(job.id).sentence, what="the worker to fall silent")
        assert f"on worker {row.worker_id} (silent for" in explain(job.id).sentence
