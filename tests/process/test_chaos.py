"""Chaos: workers are SIGKILLed at random while they drain a backlog; every effect happens once."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobs import enqueue_many
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: This test's jobs: the workers also run the test project's schedules, whose ticks may fall
#: in the run (the nightly report's is at 00:00 UTC).
chaos_jobs = Job.objects.filter(type="test.chaos")

JOBS = 2000
WORKERS = 3
CHAOS_SECONDS = 30
KILL_EVERY = 2.0


def test_random_sigkills_lose_no_job_and_duplicate_no_effect(
    worker_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    enqueue_many("test.chaos", [{"n": n, "pause": 0.04} for n in range(JOBS)])
    rng = random.Random(20261129)
    workers = [WorkerProcess(worker_env) for _ in range(WORKERS)]
    killed = 0
    try:
        chaos_ends = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < chaos_ends:
            time.sleep(KILL_EVERY * rng.uniform(0.5, 1.5))
            victim = rng.randrange(WORKERS)
            workers[victim].kill()
            workers[victim].stop()
            workers[victim] = WorkerProcess(worker_env)
            killed += 1

        wait_for(
            lambda: not chaos_jobs.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists(),
            timeout=120,
            what="the backlog to settle",
        )
        # A worker restarted a moment ago may still be starting: SIGTERM would find no handler.
        wait_for(lambda: all("worker started" in w.output() for w in workers), what="every worker to be up")
        for worker in workers:
            worker.send(signal.SIGTERM)
        assert [w.wait() for w in workers] == [0] * WORKERS
    finally:
        for worker in workers:
            worker.stop()

    assert chaos_jobs.filter(status=JobStatus.COMPLETED).count() == JOBS
    assert not chaos_jobs.exclude(status=JobStatus.COMPLETED).exists()
    keys = list(BusinessRow.objects.values_list("key", flat=True))
    assert len(keys) == len(set(keys)) == JOBS  # every business row exactly once
    recovered = JobEvent.objects.filter(kind=EventKind.RECOVERED).count()
    reruns = chaos_jobs.filter(attempts__gt=1).count()
    with capsys.disabled():  # the report goes to the terminal, also when output is captured
        print(
            f"\nchaos: {killed} SIGKILLs over {CHAOS_SECONDS}s, {recovered} executions recovered, "
            f"{reruns} jobs ran more than once, {JOBS} jobs completed, {len(keys)} business rows"
        )
    assert killed >= CHAOS_SECONDS / KILL_EVERY / 2
    assert recovered > 0
