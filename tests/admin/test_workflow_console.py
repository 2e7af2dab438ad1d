"""A workflow's page in the console: the drawing, the members, the cancel with its permission
and audit, the link from a member's page, and the list filtered by workflow."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client

from django_jobs import Step, enqueue_chain, enqueue_group
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_one
from tests.admin.console import DASHBOARD, LIST, detail_url, staff

pytestmark = pytest.mark.django_db


def page_url(workflow_id: int) -> str:
    return f"{LIST}workflow/{workflow_id}/"


def test_the_page_draws_the_chain_and_lists_its_steps(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    workflow = enqueue_chain(
        Step("test.step", {"key": "a"}),
        Step("test.step", {"key": "b"}),
        name="order <script>alert(1)</script>",
    )
    run_one()
    a, b = Job.objects.filter(workflow_id=workflow.id).order_by("id")
    page = login(superuser).get(page_url(workflow.id))
    assert page.status_code == 200
    html = page.content.decode()
    svg = re.search(r'<svg [^>]*class="djj-workflow".*?</svg>', html, re.DOTALL)
    assert svg is not None
    drawing = svg.group(0)
    # A box per step, each linking to its job; an arrow from the first to the second.
    assert drawing.count("<rect") == 2 and drawing.count("<line") == 1
    assert f'href="{detail_url(a.id)}"' in drawing and f'href="{detail_url(b.id)}"' in drawing
    assert "#b6d7a8" in drawing and "#cfe2f3" in drawing  # completed, pending
    # Nothing from elsewhere, nothing that runs; the caller's name is text.
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"(src|href)=\"https?://", drawing)
    assert "1 completed" in html and "1 pending" in html


def test_a_large_group_is_one_box_that_counts_its_jobs(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    workflow = enqueue_group([Step("test.noop", {}) for _ in range(30)], on_complete=Step("test.noop", {}))
    html = login(superuser).get(page_url(workflow.id)).content.decode()
    drawing = re.search(r'<svg [^>]*class="djj-workflow".*?</svg>', html, re.DOTALL).group(0)  # type: ignore[union-attr]
    assert drawing.count("<rect") == 2 and "30 jobs" in drawing and "30 pending" in drawing
    assert drawing.count("<line") == 1  # the members' box → the callback


def test_a_members_page_links_to_its_workflow_and_the_list_filters_by_it(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    workflow = enqueue_chain(Step("test.step", {"key": "a"}), Step("test.step", {"key": "b"}))
    enqueue_chain(Step("test.step", {"key": "c"}))
    waiting = Job.objects.get(workflow_id=workflow.id, status=JobStatus.WAITING)
    client = login(superuser)
    job_page = client.get(detail_url(waiting.id)).content.decode()
    assert f'href="{page_url(workflow.id)}"' in job_page
    assert "Why isn't this job running?" in job_page and "It waits for job" in job_page
    listed = client.get(f"{LIST}?workflow={workflow.id}").content.decode()
    assert listed.count('class="action-select"') == 2
    assert client.get(f"{LIST}?status=waiting").content.decode().count('class="action-select"') == 1
    assert "?e=1" in client.get(f"{LIST}?workflow=1x").url


def test_cancelling_a_workflow_takes_the_permission_and_a_reason_and_is_logged(
    login: Callable[[User | None], Client],
) -> None:
    workflow = enqueue_chain(Step("test.step", {"key": "a"}), Step("test.step", {"key": "b"}))
    viewer = staff("viewer", "view_job")
    client = login(viewer)
    assert client.get(page_url(workflow.id)).status_code == 200
    assert client.post(page_url(workflow.id), {"reason": "x"}).status_code == 403
    operator = staff("operator", "view_job", "cancel_job")
    client = login(operator)
    assert client.post(page_url(workflow.id), {"reason": "  "}).status_code == 400
    assert not Job.objects.filter(workflow_id=workflow.id, status=JobStatus.CANCELLED).exists()
    done = client.post(page_url(workflow.id), {"reason": "customer left"})
    assert done.status_code == 302
    assert set(Job.objects.filter(workflow_id=workflow.id).values_list("status", flat=True)) == {"cancelled"}
    events = JobEvent.objects.filter(job__workflow_id=workflow.id, kind=EventKind.CANCELLED)
    assert {(e.actor, e.reason) for e in events} == {("operator", "customer left")}
    assert LogEntry.objects.filter(user=operator, change_message__contains="customer left").exists()


def test_a_workflow_nobody_made_and_the_dashboards_waiting_count(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    client = login(superuser)
    assert client.get(page_url(424242)).status_code == 403
    enqueue_chain(Step("test.step", {"key": "a"}), Step("test.step", {"key": "b"}))
    board = client.get(DASHBOARD).content.decode()
    assert f'href="{LIST}?status=waiting&queue=default">1</a>' in board
