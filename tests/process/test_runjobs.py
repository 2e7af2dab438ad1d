"""`manage.py runjobs` as a real subprocess over a mixed set of jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)
Runjobs = Callable[..., subprocess.CompletedProcess[str]]


def test_burst_worker_settles_a_mixed_set_of_jobs(runjobs: Runjobs, tmp_path: Path) -> None:
    records = enqueue_many("test.record", [{"key": f"order:{i}"} for i in range(50)])
    flaky = enqueue("test.flaky", {"succeed_on": 2})
    permanent = enqueue("test.permanent", {})
    skipped = enqueue("test.skip", {})
    poison = enqueue("test.poison", {})
    delayed = enqueue("test.noop", {}, delay=3600)
    stats_file = tmp_path / "stats.json"

    # Burst exits once nothing is claimable; retries come due after their backoff (FAST: < 0.2 s),
    # so a few bursts settle everything but the delayed job.
    for _ in range(20):
        result = runjobs("--burst", "--concurrency", "3", "--stats-file", str(stats_file))
        assert result.returncode == 0, result.stderr
        if not Job.objects.filter(status__in=["pending", "running"]).exclude(id=delayed.id).exists():
            break
        subprocess.run(["sleep", "0.2"], check=True)

    status = dict(Job.objects.values_list("id", "status"))
    assert {status[j.id] for j in records} == {JobStatus.COMPLETED}
    assert BusinessRow.objects.count() == 50
    assert status[flaky.id] == JobStatus.COMPLETED
    assert status[permanent.id] == JobStatus.FAILED
    assert status[skipped.id] == JobStatus.SKIPPED
    assert status[poison.id] == JobStatus.FAILED
    assert status[delayed.id] == JobStatus.PENDING
    assert Job.objects.get(id=poison.id).attempts == 3
    assert JobEvent.objects.filter(job_id=flaky.id, kind=EventKind.RETRY_SCHEDULED).count() == 1
    assert " worker stopping id=" in result.stderr and ": nothing left to claim (burst)" in result.stderr
    assert result.stderr.count(" worker stopped id=") == 1 and " stopped " not in result.stdout
    summary = json.loads(stats_file.read_text())
    assert summary["lost_leases"] == 0 and summary["released"] == 0


def test_runjobs_rejects_bad_arguments_clearly(runjobs: Runjobs) -> None:
    for args, message in [
        (("--concurrency", "0"), "must be >= 1"),
        (("--concurrency", "many"), "is not an integer"),
        (("--grace", "-1"), "must be >= 0"),
        (("--queue", "bad queue"), "not a valid queue name"),
    ]:
        result = runjobs(*args)
        assert result.returncode != 0
        assert message in result.stderr


def test_a_worker_on_a_database_without_the_job_tables_stops_with_a_clear_error(
    worker_env: dict[str, str],
) -> None:
    # Not an outage to wait out: retrying forever would hide a deploy that forgot to migrate.
    url = worker_env["DATABASE_URL"].rsplit("/", 1)
    empty = f"{url[1]}_unmigrated"
    with psycopg.connect(f"{url[0]}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        result = subprocess.run(
            [sys.executable, "manage.py", "runjobs", "--burst"],
            cwd=ROOT, env={**worker_env, "DATABASE_URL": f"{url[0]}/{empty}"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        with psycopg.connect(f"{url[0]}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{empty}"')
    assert result.returncode == 2
    assert "unapplied migration" in result.stderr and "run manage.py migrate" in result.stderr
    assert "Traceback" not in result.stderr and "worker started" not in result.stderr
    assert "database unavailable" not in result.stderr


def test_a_queue_outside_the_declared_ones_is_refused_with_the_closest_name(
    worker_env: dict[str, str],
) -> None:
    # As enqueue() refuses it: a worker serving it would wait forever for jobs never written.
    job = enqueue("test.noop", {}, queue="emails")
    declared = {**worker_env, "DJANGO_JOBS_QUEUES": "default,emails,integrations,reports"}
    result = subprocess.run(
        [sys.executable, "manage.py", "runjobs", "--burst", "--queue", "emials"],
        cwd=ROOT, env=declared, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "runjobs: error: argument --queue: queue 'emials' is not declared in DJANGO_JOBS['QUEUES'] "
        "(default, emails, integrations, reports): did you mean 'emails'?"
    ) in result.stderr
    assert "Traceback" not in result.stderr and "worker started" not in result.stderr

    served = subprocess.run(
        [sys.executable, "manage.py", "runjobs", "--burst", "--queue", "emails"],
        cwd=ROOT, env=declared, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert served.returncode == 0, served.stdout + served.stderr
    assert Job.objects.get(id=job.id).status == JobStatus.COMPLETED


def test_without_declared_queues_any_queue_name_is_served(runjobs: Runjobs) -> None:
    result = runjobs("--burst", "--queue", "emials")
    assert result.returncode == 0, result.stdout + result.stderr
