"""How many durable jobs sleep and wait for a signal: counted among pending jobs only, each up to
the cap, read through the partial indexes of sleeps and open waits, and shown on the dashboard
and in the scrape."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.functions import Now
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import cancel, enqueue
from django_jobs.models import Job, JobStep
from django_jobs.reads import durable, queues
from django_jobs.reads.durable import DurableCounts, durable_counts
from django_jobs.testing import deliver, run_durable, wake

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/django_jobs/job/dashboard/"
METRICS = "/jobs/metrics"
TOKEN = "a-metrics-token-long-enough-0123"


def sleeping(run: str) -> Job:
    job = enqueue("test.durable", {"run": run, "script": [["step", "one"], ["sleep", 3600]]})
    return run_durable(job)


def waiting(run: str) -> Job:
    job = enqueue("test.durable", {"run": run, "script": [["wait", "paid", 3600]]}, signal_key=f"k:{run}")
    return run_durable(job)


def past_its_timeout(job: Job) -> None:
    """As the clock would leave it an hour on: the test's transaction holds the database's now()."""
    earlier = Now() - dt.timedelta(minutes=1)
    JobStep.objects.filter(job=job, kind="wait").update(until=earlier)
    Job.objects.filter(id=job.id).update(available_at=earlier)


def a_mix() -> None:
    """Two sleeping, three waiting (one past its timeout), and the ones not counted. The jobs
    made due come last: ``run_durable`` runs whichever of the type is due."""
    sleeping("s1"), sleeping("s2")
    waiting("w1"), waiting("w2")
    overdue = waiting("w3")
    woken = sleeping("woken")
    signalled = waiting("signalled")
    deliver("k:signalled", "paid", {})
    run_durable(signalled)  # the signal taken, the wait ended, the job completed
    cancel(sleeping("cancelled-asleep").id, reason="not wanted")
    cancel(waiting("cancelled-waiting").id, reason="not wanted")
    wake(woken)  # its sleep ends now: due, not asleep
    past_its_timeout(overdue)
    enqueue("test.durable", {"run": "done", "script": [["step", "one"]]})  # pending, never parked


def test_pending_jobs_that_sleep_and_wait_are_counted_and_no_other() -> None:
    a_mix()
    # The cancelled jobs keep their open sleep and wait, which the counts pass over.
    assert JobStep.objects.filter(job__status="cancelled", ended_at=None).count() == 2
    assert durable_counts() == DurableCounts(sleeping=2, waiting=3, overdue=1, cap=queues.COUNT_CAP)


def test_a_job_whose_signal_came_is_counted_waiting_until_a_worker_takes_it() -> None:
    job = waiting("w")
    deliver("k:w", "paid", {})
    assert durable_counts() == DurableCounts(0, 1, 0, queues.COUNT_CAP)
    run_durable(job)
    assert durable_counts() == DurableCounts(0, 0, 0, queues.COUNT_CAP)


def test_each_count_stops_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues, "COUNT_CAP", 2)
    waits = []
    for n in range(3):
        sleeping(f"s{n}")
        waits.append(waiting(f"w{n}"))
    for job in waits:
        past_its_timeout(job)
    assert durable_counts() == DurableCounts(sleeping=2, waiting=2, overdue=2, cap=2)


@pytest.fixture
def page(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_dashboard_shows_them_and_says_where_it_stopped_counting(
    page: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert 'id="durable"' not in page.get(DASHBOARD).content.decode()  # none: nothing to say
    a_mix()
    content = page.get(DASHBOARD).content.decode()
    assert "Durable jobs: <strong>2</strong> sleeping, <strong>3</strong> waiting for a signal" in content
    assert "1 past its timeout</span>)" in content
    monkeypatch.setattr(queues, "COUNT_CAP", 1)
    content = page.get(DASHBOARD).content.decode()
    assert "<strong>1+</strong> sleeping, <strong>1+</strong> waiting for a signal (" in content
    assert "1+ past its timeout</span>)" in content and "up to 1 each" in content


def scrape(client: Client) -> dict[tuple[str, str], float]:
    response = client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return {
        (sample.name, sample.labels.get("state", "")): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


@override_settings(DJANGO_JOBS={"METRICS_TOKEN": TOKEN})
def test_the_scrape_serves_them_as_gauges(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    got = scrape(client)
    assert got[("django_jobs_durable_jobs", "sleeping")] == 0  # always there, at zero
    a_mix()
    got = scrape(client)
    assert got[("django_jobs_durable_jobs", "sleeping")] == 2
    assert got[("django_jobs_durable_jobs", "waiting")] == 3
    assert got[("django_jobs_durable_waits_overdue", "")] == 1
    monkeypatch.setattr(queues, "COUNT_CAP", 1)
    got = scrape(client)
    assert got[("django_jobs_durable_jobs", "waiting")] == 1
    body = client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert "# HELP django_jobs_durable_jobs" in body and "Counted up to 1:" in body


# ---- the plan: a range of each partial index ---------------------------------------------------

#: 10,000 jobs, with a step each: most completed (with a sleep past and a wait ended), one in
#: five pending (half of them asleep, half waiting), one in fifty cancelled while it waited.
FILL_JOBS = """
INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at, attempts,
                             max_attempts, execution_id)
SELECT 'default', 'test.durable', 1, '{}',
       CASE WHEN i % 10 IN (0, 1) THEN 'pending' WHEN i % 50 = 2 THEN 'cancelled' ELSE 'completed' END,
       0, now() + interval '1 hour', 0, 5, gen_random_uuid()
FROM generate_series(1, 10000) AS i
"""
FILL_STEPS = """
INSERT INTO django_jobs_jobstep (job_id, sequence, name, kind, until, timed_out, execution_id, ended_at)
SELECT j.id, k.sequence, k.kind, k.kind,
       CASE WHEN k.kind = 'step' THEN NULL
            WHEN j.status = 'completed' THEN now() - interval '1 day'
            ELSE now() + make_interval(secs => 1 + j.id % 7200) END,
       false, j.execution_id,
       CASE WHEN k.kind = 'step' OR (k.kind = 'wait' AND j.status = 'completed') THEN now() END
FROM django_jobs_job j, (VALUES (1, 'step'), (2, 'sleep'), (3, 'wait')) AS k(sequence, kind)
WHERE j.type = 'test.durable' AND (
    k.kind = 'step' OR j.status = 'completed'
    OR (k.kind = 'sleep' AND j.status = 'pending' AND j.id % 2 = 0)
    OR (k.kind = 'wait' AND (j.status = 'cancelled' OR (j.status = 'pending' AND j.id % 2 = 1))))
"""


def plan(params: dict[str, Any], *, analyze: bool = False) -> dict[str, Any]:
    options = "ANALYZE, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}) " + durable.COUNTS, params)
        found = cursor.fetchone()[0]
    return json.loads(found) if isinstance(found, str) else found[0]["Plan"]


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(found for child in node.get("Plans", []) for found in nodes(child))]


@pytest.mark.usefixtures("vacuum_afterwards")
def test_each_count_is_a_range_of_its_partial_index_stopped_by_its_cap() -> None:
    with connection.cursor() as cursor:
        cursor.execute(FILL_JOBS)
        cursor.execute(FILL_STEPS)
        cursor.execute("ANALYZE django_jobs_job")
        cursor.execute("ANALYZE django_jobs_jobstep")
    # At the cap of 10,000, more than the ranges hold: the planner may read them by bitmap.
    whole = nodes(plan({"cap": queues.COUNT_CAP}))
    assert {"django_jobs_step_sleep", "django_jobs_step_open_wait"} <= {n.get("Index Name") for n in whole}
    assert [n["Relation Name"] for n in whole if n["Node Type"] == "Seq Scan"] == []
    # A cap below what the ranges hold: each is read in order and stopped there, the entries
    # read a few more than the jobs counted (the cancelled jobs' waits).
    with connection.cursor() as cursor:
        cursor.execute(durable.COUNTS, {"cap": 50})
        assert cursor.fetchone() == (50, 50, 0)
    executed = plan({"cap": 50}, analyze=True)
    ranges = [n for n in nodes(executed) if n.get("Relation Name") == "django_jobs_jobstep"]
    assert [(n["Node Type"], n["Index Name"]) for n in ranges] == [
        ("Index Scan", "django_jobs_step_sleep"),
        ("Index Scan", "django_jobs_step_open_wait"),
        ("Index Scan", "django_jobs_step_open_wait"),
    ]
    read = sum(
        (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get("Actual Loops", 0)
        for n in nodes(executed)
        if n.get("Relation Name") in ("django_jobs_jobstep", "django_jobs_job")
    )
    assert read < 400, read
    with connection.cursor() as cursor:
        cursor.execute(durable.COUNTS, {"cap": queues.COUNT_CAP})
        assert cursor.fetchone() == (1000, 1000, 0)
