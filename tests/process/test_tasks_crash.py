"""A task of Django's Tasks framework survives its worker's SIGKILL: the reaper takes it back
and another `runjobs` completes it, as for any job."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from django_jobs.tasks_framework import api as taskapi
from testproject.testjobs import tasks
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def workers(worker_env: dict[str, str]) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def test_a_task_whose_worker_is_killed_mid_run_is_recovered_and_completes(
    worker_env: dict[str, str], workers: list[WorkerProcess]
) -> None:
    result = tasks.slow.enqueue(1.5)
    job_id = int(result.id)
    workers.append(first := WorkerProcess(worker_env))
    started = BusinessRow.objects.filter(key=f"task-started:{job_id}:1")
    wait_for(started.exists, what="the first start")
    first.kill()
    assert tasks.slow.get_result(result.id).status == taskapi.PRIMARY.TaskResultStatus.RUNNING

    workers.append(second := WorkerProcess(worker_env))
    wait_for(lambda: tasks.slow.get_result(result.id).is_finished, what="recovery and completion")
    second.send(signal.SIGTERM)
    assert second.wait() == 0, second.output()

    done = tasks.slow.get_result(result.id)
    assert done.status == taskapi.PRIMARY.TaskResultStatus.SUCCESSFUL and done.return_value == "done"
    assert done.attempts == 2 and len(set(done.worker_ids)) == 2  # a worker id per attempt
    assert [e.exception_class_path for e in done.errors] == ["django_jobs.LeaseLost"]
