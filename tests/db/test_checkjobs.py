"""``manage.py checkjobs``, ``manage.py explainjob`` and the health check plugin, on real rows."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone
from health_check.exceptions import ServiceUnavailable, ServiceWarning

from django_jobs import pause_queue, transitions
from django_jobs.health import JobsHealthCheck
from django_jobs.models import Job
from django_jobs.observe.findings import find
from django_jobs.registry import registry
from tests.factories import JobFactory
from tests.process.workers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "diag"
THRESHOLDS = {"CHECK_OLDEST_DUE_WARNING": 300, "CHECK_OLDEST_DUE_CRITICAL": 1800, "REAPER_INTERVAL": 30}


def live_worker(worker_id: str = "w1", queues: str = "") -> None:
    transitions.report_worker(
        worker_id=worker_id,
        hostname="host",
        pid=1,
        queues=queues,
        concurrency=4,
        running=0,
        processed=0,
        job_types={t.name: t.version for t in registry.all()},
    )


def due(seconds_ago: float, **fields: object) -> None:
    JobFactory(queue=QUEUE, available_at=timezone.now() - dt.timedelta(seconds=seconds_ago), **fields)


def checkjobs(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        with override_settings(DJANGO_JOBS=THRESHOLDS):
            call_command("checkjobs", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_nothing_wrong_says_ok_and_exits_zero() -> None:
    live_worker()
    due(5)
    assert checkjobs() == (
        0,
        "OK: no backlog over its threshold, every busy queue served, no stale job, "
        "nothing holds vacuum back\n",
    )


def test_an_old_backlog_is_a_warning_then_critical() -> None:
    live_worker()
    due(600)
    code, out = checkjobs()
    assert code == 0 and out.startswith("WARNING: queue diag: its oldest due job has waited 60")
    due(7200, priority=-5)  # the oldest job hides behind a lower priority: still found
    code, out = checkjobs()
    assert code == 1 and out.startswith("CRITICAL: queue diag: its oldest due job has waited 720")


def test_a_queue_with_due_jobs_and_no_live_worker_is_critical() -> None:
    live_worker(queues="emails")
    due(5)
    JobFactory(queue="later", delayed=True)  # not due: nobody needs to serve it yet
    code, out = checkjobs("--json")
    findings = json.loads(out)
    assert code == 1
    assert [(f["level"], f["code"], f["queue"]) for f in findings] == [("critical", "no_worker", QUEUE)]


def test_a_paused_queue_is_not_reported() -> None:
    due(7200)
    pause_queue(QUEUE, actor="ops", reason="maintenance")
    assert checkjobs()[0] == 0


def test_stale_running_jobs_are_a_warning_and_critical_when_no_reaper_runs() -> None:
    live_worker()
    JobFactory(
        running=True, lease_expires_at=timezone.now() - dt.timedelta(seconds=5), heartbeat_at=timezone.now()
    )
    code, out = checkjobs()
    assert code == 0 and out.startswith("WARNING: 1 running job(s) lost their lease")
    JobFactory(running_stale=True)  # expired 59 minutes ago: over 3 × REAPER_INTERVAL
    code, out = checkjobs()
    assert code == 1 and "CRITICAL: 2 running job(s) lost their lease" in out
    assert "no reaper is running" in out


def test_the_health_check_reports_an_old_backlog_as_unavailable() -> None:
    live_worker()
    due(7200)
    with override_settings(DJANGO_JOBS=THRESHOLDS), pytest.raises(ServiceUnavailable, match="oldest due job"):
        JobsHealthCheck().run()
    # As django-health-check runs it: on a thread of its executor, with its own connection.
    result = asyncio.run(JobsHealthCheck().get_result())
    assert isinstance(result.error, ServiceUnavailable) and "queue diag" in str(result.error)


def test_the_health_endpoint_answers_500_for_an_old_backlog_and_200_once_it_is_gone(client: Client) -> None:
    live_worker()
    due(7200)
    with override_settings(DJANGO_JOBS=THRESHOLDS):
        answer = client.get("/health/", headers={"accept": "application/json"})
        assert answer.status_code == 500
        [(check, message)] = answer.json().items()
        assert check == "JobsHealthCheck(warnings_fail=False)"
        assert message.startswith("Unavailable: queue diag: its oldest due job has waited 720")
        Job.objects.filter(queue=QUEUE).update(status="completed", finished_at=timezone.now())
        answer = client.get("/health/", headers={"accept": "application/json"})
        assert (answer.status_code, answer.json()) == (200, {check: "OK"})


def test_the_health_check_passes_warnings_unless_told_to_fail_on_them() -> None:
    live_worker()
    due(600)
    with override_settings(DJANGO_JOBS=THRESHOLDS):
        JobsHealthCheck().run()
        with pytest.raises(ServiceWarning, match="oldest due job"):
            JobsHealthCheck(warnings_fail=True).run()
        assert [f.code for f in find()] == ["oldest_due"]



def due_but_not_ready(queue: str, seconds_ago: float, **fields: object) -> Job:
    """A job due for ``seconds_ago`` that no claim has promoted yet: written for later (not
    ready), then moved to the past, then marked not ready again by a write the trigger that keeps
    ``ready`` does not watch."""
    job = JobFactory(queue=queue, delayed=True, **fields)
    Job.objects.filter(pk=job.pk).update(available_at=timezone.now() - dt.timedelta(seconds=seconds_ago))
    Job.objects.filter(pk=job.pk).update(ready=False)
    assert Job.objects.filter(pk=job.pk, ready=False, available_at__lte=timezone.now()).exists()
    return job


def test_the_oldest_due_job_is_found_among_every_kind_priority_and_the_jobs_not_promoted_yet() -> None:
    from django_jobs.reads.findings import oldest_pending_ages

    for job_type, version, priority, seconds_ago in [
        ("a.first", 1, 5, 100),
        ("a.first", 1, 0, 300),
        ("a.first", 2, -3, 500),
        ("b.second", 1, 10, 200),
        ("b.second", 1, -10, 700),  # the oldest ready job: the last priority of the last kind
        ("b.second", 1, 10, 50),
    ]:
        due(seconds_ago, type=job_type, version=version, priority=priority)
    JobFactory(queue=QUEUE, type="a.first", delayed=True)  # not due: no age
    JobFactory(queue=QUEUE, type="a.first", version=3, delayed=True)  # a kind only for later
    due_but_not_ready("other", 9000, type="a.first")  # older, but in another queue
    JobFactory(queue="other", type="b.second", available_at=timezone.now() - dt.timedelta(seconds=5000))
    JobFactory(queue="later", type="a.first", delayed=True)  # a queue whose jobs all wait
    ages = oldest_pending_ages([QUEUE, "other", "later", "empty"])
    assert ages.keys() == {QUEUE, "other"}
    assert ages[QUEUE] == pytest.approx(700, abs=5)
    assert ages["other"] == pytest.approx(9000, abs=5)

    # Due for two hours but not promoted (its kind has no worker): older than every ready job.
    due_but_not_ready(QUEUE, 7200, type="c.third", priority=-1)
    ages = oldest_pending_ages([QUEUE, "other", "later"])
    assert ages == {QUEUE: pytest.approx(7200, abs=5), "other": pytest.approx(9000, abs=5)}

    # Once claimed away, the next oldest of each part is found again.
    Job.objects.filter(queue=QUEUE, type="c.third").update(status="completed", finished_at=timezone.now())
    Job.objects.filter(queue=QUEUE, priority=-10).update(status="completed", finished_at=timezone.now())
    assert oldest_pending_ages([QUEUE])[QUEUE] == pytest.approx(500, abs=5)


# ---- explainjob ---------------------------------------------------------------------------------------


def explainjob(worker_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "explainjob", *args],
        cwd=ROOT,
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_explainjob_prints_the_sentence_and_the_evidence(worker_env: dict[str, str]) -> None:
    job = JobFactory(queue=QUEUE, delayed=True)
    text = explainjob(worker_env, str(job.id))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"job {job.id}: delayed"
    assert lines[1].startswith("It was enqueued to run later: it is due in 59m")
    assert any(line.split() == ["queue", "diag"] for line in lines[2:])
    as_json = json.loads(explainjob(worker_env, str(job.id), "--json").stdout)
    assert as_json["reason"] == "delayed" and {"label": "queue", "value": "diag"} in as_json["evidence"]


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("abc", "'abc' is not a job id: give a positive whole number"),
        ("-5", "'-5' is not a job id"),
        ("0", "'0' is not a job id: ids run from 1 to 9223372036854775807"),
        ("99999999999999999999", "ids run from 1 to 9223372036854775807"),
    ],
)
def test_explainjob_refuses_what_is_not_a_job_id(worker_env: dict[str, str], arg: str, message: str) -> None:
    result = explainjob(worker_env, "--", arg)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_explainjob_says_a_missing_job_is_missing(worker_env: dict[str, str]) -> None:
    result = explainjob(worker_env, "9223372036854775807")
    assert result.returncode == 1
    assert "no job has id 9223372036854775807" in result.stderr and "Traceback" not in result.stderr


def worker_knowing(*job_types: str) -> None:
    """A live worker, as a worker of a release that registers only ``job_types`` reports itself."""
    transitions.report_worker(
        worker_id="w-known", hostname="host", pid=1, queues="", concurrency=4, running=0, processed=0,
        job_types={name: 1 for name in job_types},
    )  # fmt: skip


def test_explainjob_says_which_modules_workers_import_when_none_knows_a_task(
    worker_env: dict[str, str],
) -> None:
    from testproject.testjobs import undiscovered  # as the view that enqueues it would

    try:
        result = undiscovered.send_reminder.enqueue(7)
    finally:  # the import registered the task in this process only: later tests compare registries
        registry.unregister(undiscovered.send_reminder.module_path)
    worker_knowing("testproject.testjobs.tasks.add")
    text = explainjob(worker_env, result.id)  # a process of its own: it imports what workers do
    assert text.returncode == 0, text.stderr
    sentence = text.stdout.splitlines()[1]
    assert "runs job type testproject.testjobs.undiscovered.send_reminder" in sentence
    assert "the jobs.py and tasks.py of each installed app" in sentence
    assert "It is a task of module testproject.testjobs.undiscovered, which none of those imports" in sentence
    assert "from testproject.testjobs import undiscovered  # noqa: F401" in sentence
    as_json = json.loads(explainjob(worker_env, result.id, "--json").stdout)
    assert as_json["reason"] == "type_unknown"
    evidence = {item["label"]: item["value"] for item in as_json["evidence"]}
    modules = evidence["modules every process imports at start-up"].split(", ")
    assert {"testproject.testjobs.jobs", "testproject.testjobs.tasks"} <= set(modules)


def test_explainjob_says_workers_run_other_code_when_this_release_registers_the_type(
    worker_env: dict[str, str],
) -> None:
    job = JobFactory(type="test.noop", queue=QUEUE, available_at=timezone.now())
    worker_knowing("test.other")
    text = explainjob(worker_env, str(job.id))
    assert text.returncode == 0, text.stderr
    assert "This release registers it (in testproject.testjobs.jobs): restart those workers" in text.stdout


def test_explainjob_says_where_to_register_a_job_type_nobody_knows(worker_env: dict[str, str]) -> None:
    job = JobFactory(type="billing.charge_invoice", queue=QUEUE, available_at=timezone.now())
    worker_knowing("test.noop")
    text = explainjob(worker_env, str(job.id))
    assert text.returncode == 0, text.stderr
    assert "Register it with @job in one of those modules" in text.stdout
