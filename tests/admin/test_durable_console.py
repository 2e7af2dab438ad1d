"""A durable job's page lists its steps, sleeps and waits in order, each with its state, its
times and a preview of its result, masked for whoever may not see sensitive values."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_jobs import enqueue
from django_jobs.testing import run_durable
from tests.admin.console import detail_url, staff

pytestmark = pytest.mark.django_db


def test_the_job_page_shows_the_steps_with_their_state_and_a_masked_preview(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    script = [["step", "charge"], ["secret_step", "token"], ["wait", "paid", 3600]]
    job = enqueue("test.durable", {"run": "page", "script": script}, signal_key="page:1")
    run_durable(job)

    page = login(superuser).get(detail_url(job.id)).content.decode()
    assert 'id="job-steps"' in page
    steps = page[page.index('id="job-steps"') : page.index('id="job-history"')]
    for expected in ("<code>charge</code>", "done", "<code>paid</code>", "waiting", "sk_live_51Hx"):
        assert expected in steps, expected

    viewer = staff("viewer", "view_job")
    masked = login(viewer).get(detail_url(job.id)).content.decode()
    steps = masked[masked.index('id="job-steps"') : masked.index('id="job-history"')]
    assert "sk_live_51Hx" not in masked and "&quot;charge&quot;: 7" in steps


def test_a_job_that_is_not_durable_shows_no_steps(
    superuser: User, login: Callable[[User | None], Client]
) -> None:
    job = enqueue("test.noop", {})
    assert 'id="job-steps"' not in login(superuser).get(detail_url(job.id)).content.decode()
