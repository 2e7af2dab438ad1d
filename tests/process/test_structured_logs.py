"""A real `runjobs` given the LOGGING of docs/workers.md writes one JSON object per line, each
line about a job with the job's fields."""

from __future__ import annotations

import json
import re

import pytest

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.states import JobStatus
from tests.docs.snippets import documented_logging
from tests.process.workers import StartWorker

pytestmark = pytest.mark.django_db(transaction=True)

#: A line as runjobs writes it when it falls back to its own plain handler.
PLAIN_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ django_jobs\.", re.MULTILINE)


def test_runjobs_with_the_documented_logging_writes_json_lines_with_the_job_fields(
    start_worker: StartWorker,
) -> None:
    flaky = enqueue("test.flaky", {"succeed_on": 2}, queue="emails")
    permanent = enqueue("test.permanent", {"note": "password=hunter2x"})
    worker = start_worker("--until-settled", env={"DJANGO_JOBS_LOGGING": json.dumps(documented_logging())})
    assert worker.wait(timeout=60) == 0, worker.output()
    output = worker.output()
    assert not PLAIN_LINE.search(output), output
    # stdout carries the exit summary as text; every log line is a JSON object.
    entries = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert entries, output
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= entry.keys()
        assert entry["time"].endswith("+00:00") and entry["logger"].startswith("django_jobs")
    (started,) = [e for e in entries if e["message"].startswith("worker started")]
    worker_id = started["worker_id"]
    (retry,) = [e for e in entries if e["message"].startswith("job retry scheduled")]
    assert {k: retry[k] for k in ("job_id", "job_type", "job_queue", "job_attempt", "worker_id")} == {
        "job_id": flaky.id, "job_type": "test.flaky", "job_queue": "emails", "job_attempt": 1,
        "worker_id": worker_id,
    }  # fmt: skip
    (failed,) = [e for e in entries if e["message"].startswith("job failed")]
    assert (failed["job_id"], failed["job_type"], failed["level"]) == (
        permanent.id,
        "test.permanent",
        "WARNING",
    )
    assert failed["execution_id"] == str(Job.objects.get(id=permanent.id).execution_id)
    assert "hunter2x" not in output
    assert Job.objects.get(id=flaky.id).status == JobStatus.COMPLETED
