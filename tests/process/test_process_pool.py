"""`runjobs --pool process`: handlers run in child processes the worker can kill and recycle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import ROOT, WorkerProcess, wait_for

ROOMY_LEASE = {"DJANGO_JOBS_LEASE_TIMEOUT": "5", "DJANGO_JOBS_HEARTBEAT_INTERVAL": "0.5"}

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _status(job: Job) -> str:
    return Job.objects.get(id=job.id).status


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not yet reaped by its new parent.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_handler_stuck_past_its_deadline_is_killed_retried_and_its_child_replaced(
    worker_env: dict[str, str],
) -> None:
    stuck = enqueue("test.sleep_forever", {})
    # A lease well past the deadline: the kill at the deadline, not the reaper, must end the
    # attempt, even on a machine so busy that the kill and its write take a while.
    worker = WorkerProcess({**worker_env, **ROOMY_LEASE}, "--pool", "process", "--concurrency", "1")
    try:
        wait_for(lambda: _status(stuck) == JobStatus.FAILED, timeout=30, what="two attempts to be killed")
        after = enqueue("test.noop", {})
        wait_for(lambda: _status(after) == JobStatus.COMPLETED, what="the replaced child to run the next job")
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
        output = worker.output()
    finally:
        worker.stop()
    stuck.refresh_from_db()
    assert (stuck.attempts, stuck.last_error_code) == (2, "TIMEOUT")
    events = list(JobEvent.objects.filter(job=stuck).values_list("kind", "error_code"))
    assert events == [(EventKind.RETRY_SCHEDULED, "TIMEOUT"), (EventKind.FAILED, "TIMEOUT")]
    assert BusinessRow.objects.filter(key__startswith=f"started:{stuck.id}:").count() == 2
    assert output.count("killing the child running job") == 2


def test_a_child_that_dies_mid_job_is_replaced_and_the_job_retried(worker_env: dict[str, str]) -> None:
    job = enqueue("test.kills_its_process", {})
    worker = WorkerProcess(worker_env, "--pool", "process", "--concurrency", "2")
    try:
        wait_for(lambda: _status(job) == JobStatus.COMPLETED, timeout=30, what="the retry in a new child")
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
        output = worker.output()
    finally:
        worker.stop()
    job.refresh_from_db()
    assert job.attempts == 2
    assert list(JobEvent.objects.filter(job=job).values_list("kind", "error_code")) == [
        (EventKind.RETRY_SCHEDULED, "INTERRUPTED")
    ]
    assert "child process died running job" in output


def test_children_are_recycled_after_max_jobs(worker_env: dict[str, str]) -> None:
    jobs = [enqueue("test.noop", {}) for _ in range(12)]
    worker = WorkerProcess(worker_env, "--pool", "process", "--max-jobs-per-child", "5", "--burst")
    try:
        assert worker.wait(timeout=60) == 0
    finally:
        output = worker.output()
        worker.stop()
    assert all(_status(j) == JobStatus.COMPLETED for j in jobs)
    assert output.count("recycling child") == 2


def test_children_die_with_a_sigkilled_worker(worker_env: dict[str, str]) -> None:
    job = enqueue("test.long", {"seconds": 60})
    worker = WorkerProcess(worker_env, "--pool", "process", "--concurrency", "2")
    try:
        wait_for(lambda: BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").exists())
        children = _children(worker.pid)
        assert len(children) >= 2
        worker.kill()
        wait_for(lambda: not any(_alive(pid) for pid in children), timeout=5, what="the children to die")
    finally:
        worker.stop()


def test_shutdown_past_grace_kills_the_children_and_gives_their_jobs_back_at_once(
    worker_env: dict[str, str],
) -> None:
    job = enqueue("test.long", {"seconds": 60})
    worker = WorkerProcess(worker_env, "--pool", "process", "--grace", "0.5")
    try:
        wait_for(lambda: BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").exists())
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0
    finally:
        worker.stop()
    job.refresh_from_db()
    # The child is dead, so the execution is known to have stopped: pending at once.
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 1, "INTERRUPTED")
    assert JobEvent.objects.get(job=job).kind == EventKind.RELEASED
    assert not BusinessRow.objects.filter(key__startswith="finished:").exists()


def test_a_deadline_counts_from_when_the_child_has_the_job_not_from_its_start_up(
    worker_env: dict[str, str],
) -> None:
    """timeout=0.3 s is shorter than a new child takes to set Django up: the retry after a
    kill must still really run in the replacement child, not be killed while it starts."""
    job = enqueue("test.hung", {"seconds": 60})
    worker = WorkerProcess({**worker_env, **ROOMY_LEASE}, "--pool", "process")
    try:
        wait_for(lambda: _status(job) == JobStatus.FAILED, timeout=30, what="both attempts to be killed")
    finally:
        worker.stop()
    assert BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").count() == 2
    assert Job.objects.get(id=job.id).last_error_code == "TIMEOUT"


#: A manage.py as some projects have it: no ``if __name__ == "__main__":`` guard.
UNGUARDED_MANAGE_PY = """\
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""


def test_a_manage_py_without_a_main_guard_runs_the_process_pool(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    # spawn re-runs the parent's main module in each child: this one would start runjobs there.
    manage = tmp_path / "manage.py"
    manage.write_text(UNGUARDED_MANAGE_PY)
    job = enqueue("test.record", {"key": "unguarded"})
    result = subprocess.run(
        [sys.executable, str(manage), "runjobs", "--pool", "process", "--concurrency", "2", "--burst"],
        cwd=tmp_path, env={**worker_env, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert _status(job) == JobStatus.COMPLETED
    row = BusinessRow.objects.get(key="unguarded")
    assert row.job_id == job.id
