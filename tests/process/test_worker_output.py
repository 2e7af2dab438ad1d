"""What `runjobs` tells its operator with no LOGGING set up: how it starts, what happens to
each job that does not simply complete, and why it stops."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

import pytest
from django.db.models.functions import Now

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
Runjobs = Callable[..., subprocess.CompletedProcess[str]]

MARKER = "payload-marker-7f3a"  # in every payload: it must never reach the output


def enqueue_a_mix() -> dict[str, Job]:
    return {
        "flaky": enqueue("test.flaky", {"succeed_on": 2, "note": MARKER}),
        "permanent": enqueue("test.permanent", {"note": MARKER}),
        "noop": enqueue("test.noop", {"note": MARKER}),
    }


def test_a_worker_says_what_it_does_with_no_logging_set_up(runjobs: Runjobs) -> None:
    jobs = enqueue_a_mix()
    result = runjobs("--until-settled", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    log, summary = result.stderr, result.stdout
    flaky, permanent = jobs["flaky"].id, jobs["permanent"].id

    started = re.search(r"INFO django_jobs.worker worker started until settled id=(\S+) .*", log)
    assert started, log
    assert "queues=all concurrency=2 pool=thread" in started.group(0)
    assert "test.noop v1" in started.group(0) and "test.versioned v3" in started.group(0)
    assert "settings that differ from the defaults: " in log and "POLL_INTERVAL=0.05" in log
    assert re.search(rf"job retry scheduled id={flaky} type=test.flaky attempt=1/5 code=\S+ in=", log), log
    assert re.search(rf"WARNING django_jobs.outcomes job failed id={permanent} type=test.permanent", log)
    assert "no job pending or running (until settled)" in log
    assert MARKER not in log + summary
    # Executions and jobs, each named: the flaky job ran twice.
    # Why it stopped, then what it did, each said once, on the log's channel alone.
    stopping = re.findall(r"INFO django_jobs.worker worker stopping id=\S+: (.*)", log)
    assert stopping == ["no job pending or running (until settled)"], log
    stopped = re.findall(r"INFO django_jobs.worker worker stopped id=\S+: (.*)", log)
    assert stopped == [
        "4 executions: 2 completed, 1 retried, 1 failed (3 jobs finished); "
        "0 lease(s) lost, 0 prefetched job(s) given back"
    ], log
    assert summary == "", summary
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.COMPLETED, JobStatus.FAILED}


def test_the_start_up_log_names_the_metrics_token_but_never_prints_it(
    runjobs: Runjobs, worker_env: dict[str, str]
) -> None:
    token = "mt-token-9d2b71c4e05a83f6"
    worker_env["DJANGO_JOBS_METRICS_TOKEN"] = token  # the runjobs fixture runs with this env
    result = runjobs("--burst")  # the default formatter: no LOGGING set up
    assert result.returncode == 0, result.stderr
    assert "settings that differ from the defaults: " in result.stderr
    assert "METRICS_TOKEN=[REDACTED]" in result.stderr
    assert token not in result.stderr + result.stdout


def test_verbosity_makes_the_worker_quieter_or_louder(runjobs: Runjobs) -> None:
    enqueue_a_mix()
    quiet = runjobs("--until-settled", "-v", "0")
    assert " INFO " not in quiet.stderr and "WARNING django_jobs.outcomes job failed" in quiet.stderr
    assert quiet.stdout == ""
    enqueue_a_mix()
    loud = runjobs("--until-settled", "-v", "2")
    completions = re.findall(r"DEBUG django_jobs.outcomes job completed id=\d+ type=test\.\w+", loud.stderr)
    assert len(completions) == 2, loud.stderr
    assert MARKER not in loud.stderr


def test_a_new_worker_recovers_a_killed_workers_job_at_once(worker_env: dict[str, str]) -> None:
    job = enqueue("test.long", {"seconds": 30})
    # The periodic reaper waits at least 0.8 × 600 s: only the pass at start can recover the job.
    slow_reaper = {**worker_env, "DJANGO_JOBS_REAPER_INTERVAL": "600"}
    first = WorkerProcess(slow_reaper)
    second = None
    try:
        wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.RUNNING, what="the job to start")
        first.kill()
        wait_for(
            lambda: Job.objects.filter(id=job.id, lease_expires_at__lt=Now()).exists(),
            what="the killed worker's lease to expire",
        )
        second = WorkerProcess(slow_reaper)
        wait_for(
            lambda: JobEvent.objects.filter(job_id=job.id, kind=EventKind.RECOVERED).exists(),
            timeout=15,
            what="the new worker's first reaper pass",
        )
        wait_for(lambda: "job recovered" in second.output(), what="the recovery to be logged")
        recovered = rf"job recovered id={job.id} type=test.long lost_execution=\S+ worker=\S+"
        assert re.search(recovered, second.output())
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_absurd_concurrency_is_refused_with_the_reason(runjobs: Runjobs) -> None:
    result = runjobs("--concurrency", "100000")
    assert result.returncode != 0
    assert "more than 256: each slot holds its own database connection" in result.stderr
    both = runjobs("--burst", "--until-settled")
    assert both.returncode != 0 and "not allowed with argument" in both.stderr
