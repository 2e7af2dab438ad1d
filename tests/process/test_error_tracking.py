"""docs/operations/tracing.md's Sentry recipe (testproject/shop/error_tracking.py) in a real worker
process with sentry-sdk's Django integration, its events written by a transport of the SDK's
own kind to a file instead of sent (testproject/sentry_file.py): no network."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.states import JobStatus
from tests.process.workers import StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def events_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_failed_attempts_are_events_of_one_issue_per_job_tagged_with_the_job(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    events_file = tmp_path / "sentry.events"
    retried = enqueue("test.traced", {"succeed_on": 3})  # fails twice, its error holds a secret
    failed = enqueue("test.permanent", {})
    told = enqueue("test.tells_sentry", {})
    worker = start_worker(env={"SENTRY_EVENTS_FILE": str(events_file)})
    ended = (JobStatus.COMPLETED, JobStatus.FAILED)
    wait_for(lambda: Job.objects.exclude(status__in=ended).count() == 0, what="the jobs to end")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0

    events = events_in(events_file)
    by_job: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_job.setdefault(event["tags"]["job.id"], []).append(event)

    attempts = sorted(by_job[str(retried.id)], key=lambda e: e["tags"]["job.attempt"])
    assert [e["tags"]["job.attempt"] for e in attempts] == ["1", "2"]  # the third completed
    assert {json.dumps(e["fingerprint"]) for e in attempts} == {
        json.dumps(["django_jobs", "test.traced", str(retried.id)])
    }
    for event in attempts:
        assert event["tags"]["job.type"] == "test.traced" and event["tags"]["job.status"] == "pending"
        assert (event["level"], event["tags"]["job.error_code"]) == ("warning", "PROVIDER_5XX")
        assert "[REDACTED]" in event["message"]
    assert "hunter2" not in events_file.read_text()

    (permanent,) = by_job[str(failed.id)]
    assert (permanent["level"], permanent["tags"]["job.status"]) == ("error", "failed")
    assert permanent["fingerprint"] == ["django_jobs", "test.permanent", str(failed.id)]

    # What the handler itself reported carries its job, from the handler's thread.
    (inside,) = by_job[str(told.id)]
    assert inside["message"] == "the warehouse is short of stock"
    assert (inside["tags"]["job.type"], inside["tags"]["job.attempt"]) == ("test.tells_sentry", "1")
    assert "fingerprint" not in inside or inside["fingerprint"] != [
        "django_jobs",
        "test.tells_sentry",
        str(told.id),
    ]
    assert len(events) == 4, events
