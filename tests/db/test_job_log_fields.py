"""Every log line about a job names it in fields: a mixed workload through a real worker, its
lines captured as the documented JSON logging writes them."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Iterator

import pytest
from django.db.models.functions import Now

from django_jobs import enqueue
from django_jobs.decision import Happened
from django_jobs.logs import JSONFormatter
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.runtime import outcomes
from django_jobs.runtime.executor import Finished
from django_jobs.states import ACTIVE_STATUSES, JobStatus
from django_jobs.transitions import ClaimStatement, Outcome, claim
from tests.db.inprocess import BackgroundWorker, wait_for
from tests.docs.snippets import documented_logging

pytestmark = pytest.mark.django_db(transaction=True)

FIVE = ("job_id", "job_type", "job_queue", "job_attempt", "execution_id")
#: A line that names a job in its text: "id=12", "job=12" (a worker's id is not a number).
NAMES_A_JOB = re.compile(r"\b(?:id|job)=(\d+)\b")


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The django_jobs loggers' lines, written by the formatter docs/workers.md configures,
    at DEBUG so that completions are in."""
    formatter_spec = documented_logging()["formatters"]["json"]  # type: ignore[index]
    assert formatter_spec == {"()": "django_jobs.logs.JSONFormatter"}
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JSONFormatter())
    package = logging.getLogger("django_jobs")
    saved = (package.handlers[:], package.level, package.propagate)
    package.handlers, package.propagate = [handler], False
    package.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        package.handlers, package.level, package.propagate = saved


def test_every_line_about_a_job_names_its_job_execution_and_attempt(json_lines: io.StringIO) -> None:
    jobs = {
        "noop": enqueue("test.noop", {}),
        "flaky": enqueue("test.flaky", {"succeed_on": 2}, queue="emails"),
        "permanent": enqueue("test.permanent", {}),
        "cancelled": enqueue("test.cancel_then_fail", {}, queue="reports"),
        "lost": enqueue("test.lease_only", {"seconds": 1.5}),
    }
    lost = jobs["lost"]
    with BackgroundWorker(concurrency=5) as worker:
        # The lease of test.lease_only is 0.3s and nothing extends it: it expires mid-run, the
        # reaper takes the job back, and the execution then learns that its lease is lost.
        wait_for(
            lambda: Job.objects.filter(
                id=lost.id, status=JobStatus.RUNNING, lease_expires_at__lt=Now()
            ).exists()
        )
        assert [r.id for r in reaper.recover_jobs()] == [lost.id]
        discarded = '"logger": "django_jobs.executor", "message": "outcome discarded, lease lost'
        wait_for(lambda: discarded in json_lines.getvalue())
        wait_for(lambda: not Job.objects.filter(status__in=ACTIVE_STATUSES).exists())

    entries = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    rows = {job.id: job for job in Job.objects.all()}
    # The executions the database knows of each job: its events', and the last one's on the row
    # (a plain completion writes no event).
    executions = {job.id: {str(job.execution_id)} for job in rows.values()}
    for job_id, execution_id in JobEvent.objects.exclude(execution_id=None).values_list(
        "job_id", "execution_id"
    ):
        executions[job_id].add(str(execution_id))
    about_jobs = [e for e in entries if "job_id" in e]
    for entry in entries:
        named = NAMES_A_JOB.search(entry["message"])
        if named:  # a line that names a job in its text names it in its fields
            assert entry.get("job_id") == int(named.group(1)), entry
    for entry in about_jobs:
        assert set(FIVE) <= entry.keys(), entry
        job = rows[entry["job_id"]]
        assert (entry["job_type"], entry["job_queue"]) == (job.type, job.queue), entry
        assert 1 <= entry["job_attempt"] <= job.attempts, entry
        assert entry["execution_id"] in executions[job.id], entry
        assert entry["worker_id"] == worker.worker_id, entry

    def lines(job: Job, start: str) -> list[dict[str, object]]:
        return [e for e in about_jobs if e["job_id"] == job.id and str(e["message"]).startswith(start)]

    flaky = jobs["flaky"]
    (retry,) = lines(flaky, "job retry scheduled")
    (completed,) = lines(flaky, "job completed")
    assert (retry["job_attempt"], completed["job_attempt"], retry["level"]) == (1, 2, "INFO")
    assert retry["execution_id"] != completed["execution_id"]
    assert "code=PROVIDER_5XX" in str(retry["message"])
    assert lines(jobs["noop"], "job completed")[0]["job_attempt"] == 1
    assert lines(jobs["permanent"], "job failed")[0]["level"] == "WARNING"
    assert lines(jobs["cancelled"], "job cancelled")[0]["job_queue"] == "reports"
    (recovered,) = lines(lost, "job recovered")
    lease_lost = lines(lost, "lease lost") + lines(lost, "outcome discarded, lease lost")
    assert {e["logger"] for e in lease_lost} >= {"django_jobs.executor"}
    assert recovered["logger"] == "django_jobs.reaper" and recovered["job_attempt"] == 1
    assert {e["execution_id"] for e in lease_lost} == {recovered["execution_id"]}
    uuid.UUID(str(recovered["execution_id"]))
    assert rows[lost.id].status == JobStatus.FAILED  # its one attempt was lost
    # Lines about the worker itself carry its id.
    assert any(
        e["message"].startswith("worker started") and e["worker_id"] == worker.worker_id for e in entries
    )


def test_a_refused_batch_names_its_jobs_and_the_refused_row_its_execution(json_lines: io.StringIO) -> None:
    for _ in range(3):
        enqueue("test.noop", {})
    claims = claim(ClaimStatement("w-1", None, {"test.noop": 1}), 10)
    by_id = {c.id: Finished(c, Happened.COMPLETED) for c in claims}
    good = [Outcome(c.id, c.execution_id, JobStatus.COMPLETED) for c in claims[:2]]
    # An outcome that bypassed sanitising: PostgreSQL refuses NUL in text.
    poisoned = Outcome(claims[2].id, claims[2].execution_id, JobStatus.FAILED, error_code="X", error="a\x00b")
    outcomes._write([*good, poisoned], by_id, "w-1")

    entries = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    (batch,) = [e for e in entries if e["message"].startswith("a batch of 3 outcome(s) was refused")]
    assert batch["job_ids"] == [c.id for c in claims] and batch["worker_id"] == "w-1"
    assert "Traceback" in batch["exception"] and "a\x00b" not in json_lines.getvalue()
    (refused,) = [e for e in entries if e["message"].startswith("outcome refused by the database")]
    assert {k: refused[k] for k in FIVE} == {
        "job_id": claims[2].id, "job_type": "test.noop", "job_queue": "default",
        "job_attempt": claims[2].attempt, "execution_id": str(claims[2].execution_id),
    }  # fmt: skip
