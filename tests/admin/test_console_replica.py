"""The console reading from a replica (``CONSOLE_DATABASE``): its pages and the metrics view read
the job tables there and say how far behind it is, every action runs on the primary, and an
action whose job is no longer as its page showed it is refused and changes nothing.

The replica here is the test project's ``replica`` alias: a second connection to the test
database, made read-only as a standby is. tests/process/test_console_replica.py runs the same
against a streaming standby that falls behind on cue.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connections
from django.db.models.functions import Now
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from django_jobs import Step, enqueue_chain, retry
from django_jobs.models import Job, JobEvent
from django_jobs.states import JobStatus
from tests.admin.console import DASHBOARD, LIST, act_url, detail_url
from tests.factories import JobFactory

# Committed rows, so that the replica's own connection sees them.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

BANNER = 'id="replica-lag"'


@pytest.fixture
def replica() -> Iterator[None]:
    """The console reads from the ``replica`` alias, which refuses writes as a standby does."""
    with connections["replica"].cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    try:
        with override_settings(DJANGO_JOBS={"CONSOLE_DATABASE": "replica"}):
            yield
    finally:
        connections["replica"].close()


def job_table_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "django_jobs_" in q["sql"]]


def hidden_fields(page: str) -> dict[str, str]:
    """What a confirmation page's form sends besides the reason."""
    return dict(re.findall(r'<input type="hidden" name="(ids|seen)" value="([^"]*)"', page))


def confirmation(client: Client, action: str, *ids: int) -> dict[str, str]:
    page = client.get(act_url(action, *ids))
    assert page.status_code == 200
    return hidden_fields(page.content.decode())


def as_it_is(job_id: int) -> tuple[object, ...]:
    """The job's row and its records, to show that nothing was written."""
    row = Job.objects.values_list("status", "attempts", "manual_retries", "execution_id").get(id=job_id)
    return (*row, JobEvent.objects.filter(job_id=job_id).count(), LogEntry.objects.count())


@pytest.mark.usefixtures("replica")
def test_the_pages_read_the_job_tables_from_the_replica_and_say_how_far_behind_it_is(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    failed = JobFactory(failed=True)
    workflow = enqueue_chain(Step("test.step", {"key": "a"}), Step("test.step", {"key": "b"}))
    client = login(superuser)
    pages = [
        LIST,
        f"{LIST}?status=failed&attention=review",
        detail_url(failed.id),
        DASHBOARD,
        f"{LIST}workflow/{workflow.id}/",
        act_url("retry", failed.id),
        "/admin/django_jobs/job/queue/pause/?queue=default",
    ]
    for url in pages:
        with (
            CaptureQueriesContext(connections["default"]) as primary,
            CaptureQueriesContext(connections["replica"]) as read,
        ):
            page = client.get(url)
        assert page.status_code == 200, url
        assert job_table_reads(primary) == [], url
        assert job_table_reads(read), url
        html = page.content.decode()
        # The test's replica is no standby: the banner says so, in red.
        assert BANNER in html and "Read from replica <code>replica</code>: not a standby" in html, url


def test_without_a_replica_the_pages_read_the_primary_and_show_no_banner(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(failed=True)
    client = login(superuser)
    with CaptureQueriesContext(connections["replica"]) as read:
        pages = [client.get(url) for url in (LIST, DASHBOARD)]
    assert read.captured_queries == []
    assert all(page.status_code == 200 and BANNER not in page.content.decode() for page in pages)


@pytest.mark.usefixtures("replica")
def test_the_metrics_view_reads_the_queues_from_the_replica_and_serves_its_lag(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(queue="emails")
    client = login(superuser)
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections["replica"]) as read,
    ):
        response = client.get("/jobs/metrics")
    assert response.status_code == 200
    assert job_table_reads(primary) == [] and job_table_reads(read)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples[("django_jobs_queue_pending", (("queue", "emails"),))] == 1
    # Not a standby: nobody can say how far behind it is.
    assert math.isnan(samples[("django_jobs_console_replica_lag_seconds", (("database", "replica"),))])


def test_without_a_replica_the_metrics_view_serves_no_lag(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    response = login(superuser).get("/jobs/metrics")
    assert response.status_code == 200 and b"replica_lag" not in response.content


@pytest.mark.usefixtures("replica")
def test_an_action_confirmed_on_a_page_read_from_the_replica_runs_on_the_primary(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    client = login(superuser)
    form = confirmation(client, "retry", job.id)
    assert form == {"ids": str(job.id), "seen": f"{job.id}:failed::5:0"}
    with CaptureQueriesContext(connections["replica"]) as read:
        done = client.post(act_url("retry", job.id), {**form, "reason": "provider fixed"})
    assert done.status_code == 302
    assert job_table_reads(read) == []
    job.refresh_from_db()
    assert (job.status, job.manual_retries) == (JobStatus.PENDING, 1)
    assert LogEntry.objects.get(object_id=str(job.id)).user == superuser


@pytest.mark.usefixtures("replica")
@pytest.mark.parametrize("then", ["retried", "retried and failed again"])
def test_an_action_on_a_job_no_longer_as_its_page_showed_it_is_refused_and_changes_nothing(
    then: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    client = login(superuser)
    form = confirmation(client, "retry", job.id)
    # Behind the page's back, another operator retries the job (and it fails again).
    retry(job.id, reason="fixed upstream", actor="another-operator")
    if then == "retried and failed again":
        Job.objects.filter(id=job.id).update(
            status=JobStatus.FAILED, attempts=1, execution_id=uuid.uuid4(), finished_at=Now()
        )
    before = as_it_is(job.id)
    page = client.post(act_url("retry", job.id), {**form, "reason": "provider fixed"}, follow=True)
    html = page.content.decode()
    expected = {
        "retried": "it is pending now, not failed as the page showed it",
        "retried and failed again": "it was retried by hand since the page showed it",
    }[then]
    # The admin capitalises its messages.
    assert f"Job {job.id} was not retried: {expected}. Nothing was done; reload the page." in html
    assert as_it_is(job.id) == before


@pytest.mark.usefixtures("replica")
def test_of_the_selected_jobs_only_those_shown_and_still_as_shown_are_acted_on(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    still, moved, unoffered = JobFactory(), JobFactory(), JobFactory(failed=True)
    client = login(superuser)
    form = confirmation(client, "cancel", still.id, moved.id, unoffered.id)  # "no" for the failed one
    claimed = JobFactory.build(running=True)  # meanwhile, a worker claimed it
    Job.objects.filter(id=moved.id).update(
        **{f: getattr(claimed, f) for f in ("status", "attempts", "worker_id", "execution_id", "started_at",
                                           "heartbeat_at", "lease_expires_at")}
    )  # fmt: skip
    retry(unoffered.id, reason="fixed upstream", actor="another-operator")  # cancellable now
    page = client.post(act_url("cancel", still.id), {**form, "reason": "wrong customer"}, follow=True)
    html = page.content.decode()
    assert "Cancel: 1 job(s) done." in html
    assert f"Job {moved.id} was not cancelled: it is running now, not pending as the page showed it" in html
    assert dict(Job.objects.values_list("id", "status")) == {
        still.id: JobStatus.CANCELLED,
        moved.id: JobStatus.RUNNING,
        unoffered.id: JobStatus.PENDING,  # the page offered no cancel of it: none happened
    }
    assert not JobEvent.objects.filter(job_id=moved.id).exists()
    assert JobEvent.objects.filter(job_id=unoffered.id).count() == 1  # its retry


def test_a_form_that_misstates_what_its_page_showed_is_a_clear_400(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    response = login(superuser).post(
        act_url("retry", job.id), {"ids": str(job.id), "seen": f"{job.id}:exploded", "reason": "x"}
    )
    assert response.status_code == 400 and b"not a job as a page showed it" in response.content
    assert Job.objects.get(id=job.id).status == JobStatus.FAILED
