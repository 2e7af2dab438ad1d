"""The console's "Retry all matching…" / "Cancel all matching…": the links on a filtered list,
the confirmation page, the operation's page, and who may do what."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_jobs.console import bulk_pages
from django_jobs.console.job_filter import InvalidFilter, JobFilter
from django_jobs.models import BulkOperation, BulkState, Job, JobEvent
from django_jobs.states import JobStatus
from tests.admin.console import LIST, detail_url, staff
from tests.db.inprocess import run_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

CODE = "PROVIDER_DOWN"
BULK = "/admin/django_jobs/job/bulk/"
Login = Callable[[User | None], Client]


def operation_url(operation_id: int) -> str:
    return f"/admin/django_jobs/job/operation/{operation_id}/"


@pytest.fixture
def incident() -> list[Job]:
    """Six jobs failed with one code in queue payments, and others that must not be touched."""
    JobFactory(failed=True, last_error_code="OTHER", queue="payments")
    JobFactory(completed=True, last_error_code=CODE, queue="payments")
    return [
        JobFactory(failed=True, last_error_code=CODE, queue="payments", execution_id=uuid.uuid4())
        for _ in range(6)
    ]


def test_a_filtered_list_offers_to_act_on_all_matching(
    login: Login, superuser: User, incident: list[Job]
) -> None:
    client = login(superuser)
    page = client.get(f"{LIST}?failed_code={CODE}").content.decode()
    assert f'href="{BULK}retry/?failed_code={CODE}"' in page and "Retry all matching…" in page
    assert f'href="{BULK}cancel/?failed_code={CODE}"' in page
    # Without a filter there is nothing to offer: the console never acts on every job there is.
    assert "all matching" not in client.get(LIST).content.decode()
    assert "all matching" not in client.get(f"{LIST}?attention=stale").content.decode()


def test_retry_all_matching_from_confirmation_to_done(
    login: Login, superuser: User, incident: list[Job]
) -> None:
    client = login(superuser)
    url = f"{BULK}retry/?failed_code={CODE}&queue=payments"
    page = client.get(url).content.decode()
    assert "<strong>6</strong> jobs match" in page
    assert all(f"#{job.id}<" in page for job in incident)
    assert 'value="50"' in page  # the safe default pace

    refused = client.post(url, {"reason": "  ", "pace": "50"})
    assert refused.status_code == 400 and b"Say why" in refused.content
    refused = client.post(url, {"reason": "provider back", "pace": "0"})
    assert refused.status_code == 400 and b"The pace is jobs per second" in refused.content
    assert not BulkOperation.objects.exists()

    response = client.post(url, {"reason": "provider back", "pace": "200"})
    operation = BulkOperation.objects.get()
    assert response.status_code == 302 and response["Location"] == operation_url(operation.id)
    assert (operation.actor, operation.pace, operation.total) == ("root", 200, 6)
    assert operation.filter == {"status": "failed", "queue": "payments", "code": CODE}
    page = client.get(operation_url(operation.id)).content.decode()
    assert "Running" in page and 'http-equiv="refresh"' in page and "0 done, 0 skipped, 6 left" in page

    run_worker(queues=["default"])
    page = client.get(operation_url(operation.id)).content.decode()
    assert "Done" in page and "6 done, 0 skipped, 0 left" in page and 'http-equiv="refresh"' not in page
    assert Job.objects.filter(status=JobStatus.PENDING, id__in=[j.id for j in incident]).count() == 6
    # Each job's history links to the operation.
    assert f'href="{operation_url(operation.id)}"' in client.get(detail_url(incident[0].id)).content.decode()
    listed = client.get("/admin/django_jobs/job/operations/").content.decode()
    assert f'href="{operation_url(operation.id)}"' in listed and "provider back" in listed


def test_a_view_only_user_sees_no_action_and_a_forged_post_changes_nothing(
    login: Login, incident: list[Job]
) -> None:
    client = login(staff("viewer", "view_job"))
    page = client.get(f"{LIST}?failed_code={CODE}").content.decode()
    assert "all matching" not in page
    for action in ("retry", "cancel"):
        assert client.get(f"{BULK}{action}/?failed_code={CODE}").status_code == 403
        forged = client.post(f"{BULK}{action}/?failed_code={CODE}", {"reason": "mine now", "pace": "1000"})
        assert forged.status_code == 403
    assert not BulkOperation.objects.exists()
    assert not JobEvent.objects.exists()
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 7


def test_each_action_needs_its_own_permission(login: Login, incident: list[Job]) -> None:
    client = login(staff("retrier", "view_job", "retry_job"))
    page = client.get(f"{LIST}?failed_code={CODE}").content.decode()
    assert "Retry all matching…" in page and "Cancel all matching…" not in page
    assert client.post(f"{BULK}cancel/?queue=payments", {"reason": "r", "pace": "5"}).status_code == 403
    response = client.post(f"{BULK}retry/?failed_code={CODE}", {"reason": "r", "pace": "5"})
    operation = BulkOperation.objects.get()
    assert response.status_code == 302
    # Stopping it takes the same permission.
    viewer = login(staff("viewer", "view_job"))
    assert viewer.get(operation_url(operation.id)).status_code == 200
    assert b"Stop the operation" not in viewer.get(operation_url(operation.id)).content
    assert viewer.post(operation_url(operation.id), {"reason": "no"}).status_code == 403
    operation.refresh_from_db()
    assert operation.state == BulkState.RUNNING


def test_stop_from_the_operations_page(login: Login, superuser: User, incident: list[Job]) -> None:
    client = login(superuser)
    client.post(f"{BULK}retry/?failed_code={CODE}", {"reason": "provider back", "pace": "5"})
    operation = BulkOperation.objects.get()
    assert client.post(operation_url(operation.id), {"reason": ""}).status_code == 400
    response = client.post(operation_url(operation.id), {"reason": "down again"})
    assert response.status_code == 302
    operation.refresh_from_db()
    assert (operation.state, operation.cancelled_by, operation.cancel_reason) == (
        BulkState.CANCELLED, "root", "down again",
    )  # fmt: skip
    run_worker(queues=["default"])
    assert Job.objects.filter(status=JobStatus.FAILED, last_error_code=CODE).count() == 6
    assert b"stopped by" in client.get(operation_url(operation.id)).content
    assert client.get(operation_url(10**12)).status_code == 404


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "choose a filter first"),
        ("?attention=stale", "reaper"),
        ("?restore=held", "releasing the hold"),
        ("?status=completed&failed_code=X", "contradict"),
        ("?status=pending", "only failed"),
        ("?status=nonsense", "status"),
        ("?ended=yesterday", "ended"),
        ("?payload__card=4", "not a filter of jobs"),
        ("?queue=nowhere", "no job has queue"),
        ("?q=" + "x" * 400, "at most 300"),
        ("?failed_code=NEVER", ""),  # valid: the page says nothing matches
    ],
)
def test_a_filter_that_cannot_be_acted_on_is_refused(
    login: Login, superuser: User, incident: list[Job], query: str, message: str
) -> None:
    client = login(superuser)
    response = client.get(f"{BULK}retry/{query}")
    if message:
        assert response.status_code == 400 and message in response.content.decode()
        assert response["Content-Type"].startswith("text/plain")
    else:
        assert response.status_code == 200 and b"No job of this list can be changed" in response.content
    assert client.post(f"{BULK}retry/{query}", {"reason": "r", "pace": "5"}).status_code == 400
    assert not BulkOperation.objects.exists()


def test_the_unknown_action_is_refused(login: Login, superuser: User) -> None:
    assert login(superuser).get(f"{BULK}delete/?status=failed").status_code == 400


def test_the_list_reads_the_ended_filter(login: Login, superuser: User, incident: list[Job]) -> None:
    client = login(superuser)
    page = client.get(f"{LIST}?ended=1h&failed_code={CODE}").content.decode()
    assert all(f">{job.id}<" in page for job in incident)
    assert client.get(f"{LIST}?ended=2000-01-01T00:00").status_code == 200
    assert "?e=1" in client.get(f"{LIST}?ended=nonsense")["Location"]


def test_list_filters_become_the_operations_filter() -> None:
    def read(query: str) -> JobFilter:
        from django.http import QueryDict

        return bulk_pages.filter_from_list(QueryDict(query))

    assert read("failed_code=X&queue=payments&o=1&p=2") == JobFilter(
        status="failed", code="X", queue="payments"
    )
    assert read("attention=review") == JobFilter(status="needs_review")
    assert read("status=needs_review&attention=review") == JobFilter(status="needs_review")
    assert read("workflow=12&q=order-7") == JobFilter(workflow=12, search="order-7")
    assert read("error_code=X&type=shop.refund").code == "X"
    assert read("ended=2h").ended_since is not None
    for query in ("workflow=abc", "attention=other", "status=failed&attention=review"):
        with pytest.raises(InvalidFilter):
            read(query)


def test_a_recorded_filter_is_shown_as_given_even_when_it_would_no_longer_apply(
    login: Login, superuser: User
) -> None:
    """A search field declared then and gone now, a queue since emptied: the record stands."""
    recorded = {"search": "gone_field=1", "queue": "<script>alert(1)</script>"}
    operation = BulkOperation.objects.create(
        action="retry", filter=recorded, actor="ops", reason="r", pace=5, total=0, state=BulkState.DONE
    )
    page = login(superuser).get(operation_url(operation.id)).content.decode()
    assert "search=gone_field=1" in page and "<script>alert" not in page
    assert "gone_field" in login(superuser).get("/admin/django_jobs/job/operations/").content.decode()
