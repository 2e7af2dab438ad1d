"""The console's multi-select retry of a workflow's failed member and the callback its failure
stopped: whichever the console acts on first, the callback waits for the member's end."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_jobs import Step, enqueue_group
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.testing import run_until_settled
from testproject.testjobs.models import BusinessRow

pytestmark = pytest.mark.django_db(transaction=True)
Login = Callable[[User | None], Client]


def step(key: str, **payload: Any) -> Step:
    return Step("test.step", {"key": key, **payload})


def status(job: Job) -> str:
    return str(Job.objects.get(id=job.id).status)


def test_the_consoles_multi_select_retry_of_a_member_and_its_stopped_callback_runs_neither_first(
    login: Login, superuser: User
) -> None:
    workflow = enqueue_group(
        [step("m0"), step("m1", fail=True)],
        on_success=Step("test.summarise", {"key": "ok"}),
        on_failure=Step("test.summarise", {"key": "bad"}),
    )
    run_until_settled(in_thread=True)
    member = Job.objects.get(workflow_id=workflow.id, status=JobStatus.FAILED)
    on_success = Job.objects.get(workflow_id=workflow.id, step__role="on_success")
    client = login(superuser)
    ids = f"{member.id},{on_success.id}"
    page = client.get(f"/admin/django_jobs/job/act/retry/?ids={ids}").content.decode()
    seen = re.search(r'name="seen" value="([^"]*)"', page)
    assert seen is not None
    client.post(
        "/admin/django_jobs/job/act/retry/", {"ids": ids, "seen": seen.group(1), "reason": "provider is back"}
    )

    assert (status(member), status(on_success)) == (JobStatus.PENDING, JobStatus.WAITING)
    run_until_settled(in_thread=True)
    assert (status(member), status(on_success)) == (JobStatus.FAILED, JobStatus.CANCELLED)
    assert not BusinessRow.objects.filter(key="ok").exists()
