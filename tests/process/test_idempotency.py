"""Article tests 6 and 7: the worker dies right after the side effect; the effect stays single."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent, ProcessedEffect
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_until_settled
from testproject.demo.provider import FakeProvider
from testproject.testjobs.models import EffectLog
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(worker_env: dict[str, str], provider: FakeProvider) -> dict[str, str]:
    return {**worker_env, "DEMO_PROVIDER_URL": os.environ["DEMO_PROVIDER_URL"]}


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def crash_then_recover(env: dict[str, str], workers: list[WorkerProcess], job: Job) -> Job:
    """Run the job on a worker that SIGKILLs itself mid-job, then on a healthy one."""
    doomed = WorkerProcess(env)
    workers.append(doomed)
    assert doomed.wait(timeout=20) == -signal.SIGKILL  # the hook killed it at the chosen point
    assert Job.objects.get(id=job.id).status == JobStatus.RUNNING

    rescuer = WorkerProcess(env)
    workers.append(rescuer)
    wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what="recovery")
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait() == 0
    job.refresh_from_db()
    assert job.attempts == 2
    assert JobEvent.objects.filter(job=job, kind=EventKind.RECOVERED).count() == 1
    return job


@pytest.mark.slow
def test_6_killed_after_a_database_effect_the_retry_does_not_repeat_it(
    env: dict[str, str], workers: list[WorkerProcess]
) -> None:
    job = enqueue("test.invoice", {"order": 1842, "crash_plan": ["after_effect"]})
    crash_then_recover(env, workers, job)
    assert EffectLog.objects.filter(key="invoice:order:1842").count() == 1
    assert ProcessedEffect.objects.get(key="invoice:order:1842").job_id == job.id


@pytest.mark.slow
def test_6_killed_after_an_external_effect_the_retry_reuses_its_idempotency_key(
    env: dict[str, str], workers: list[WorkerProcess], provider: FakeProvider
) -> None:
    job = enqueue("test.charge", {"order": 77, "crash_plan": ["after_effect"]})
    crash_then_recover(env, workers, job)
    assert provider.requests["charge-77"] == 2  # the call really was made twice…
    assert len(provider.objects_for("charge-77")) == 1  # …and the provider holds one charge


@pytest.mark.slow
def test_killed_before_the_effect_the_retry_does_it_once(
    env: dict[str, str], workers: list[WorkerProcess]
) -> None:
    job = enqueue("test.invoice", {"order": 5, "crash_plan": ["before_effect"]})
    crash_then_recover(env, workers, job)
    assert EffectLog.objects.filter(key="invoice:order:5").count() == 1


def test_7_dropped_answer_is_retried_with_the_same_key(provider: FakeProvider) -> None:
    job = enqueue("test.charge", {"order": 9, "query": "?drop=1"})
    run_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)
    assert JobEvent.objects.get(job=job).error_code == "NETWORK_TIMEOUT"
    assert provider.requests["charge-9"] == 2
    assert len(provider.objects_for("charge-9")) == 1
