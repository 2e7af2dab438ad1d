"""A project that switches TASKS' BACKEND to django_jobs runs its @task code unchanged.

The tasks are the reference backend's documented usage (testproject/testjobs/tasks.py, the
bottom section); the same code runs on the framework's own ImmediateBackend and on ours, and
the results agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.test import override_settings

from django_jobs.tasks_framework import api as taskapi
from django_jobs.testing import run_jobs
from testproject.testjobs.tasks import email_users, email_users_with_context

pytestmark = pytest.mark.django_db(transaction=True)

Status = taskapi.PRIMARY.TaskResultStatus
IMMEDIATE = {"default": {"BACKEND": f"{taskapi.PRIMARY.module}.backends.immediate.ImmediateBackend"}}


def documented_usage() -> list[Any]:
    """What the framework's documentation shows, step by step; returns what a project sees."""
    result = email_users.enqueue(
        emails=["user@example.com"], subject="You have a message", message="Hello there!"
    )
    # Portable code asks the backend whether results can be read back (the immediate backend
    # has them in hand already).
    durable = email_users.get_backend().supports_get_result
    run_jobs()  # the worker: `manage.py runjobs` (a no-op for a backend that ran it already)
    if durable:
        result.refresh()
    fetched = email_users.get_result(result.id) if durable else result
    prioritised = email_users.using(priority=10).enqueue(["a@example.com"], "Urgent", "Now")
    with_context = email_users_with_context.enqueue(["b@example.com"], "Context", "Hi")
    run_jobs()
    if durable:
        prioritised.refresh()
        with_context.refresh()
    return [
        result.status, result.return_value, fetched.status, fetched.return_value, fetched.args,
        fetched.kwargs, prioritised.return_value, prioritised.task.priority, with_context.return_value,
        with_context.attempts, [m.subject for m in mail.outbox],
    ]  # fmt: skip


def test_the_documented_usage_behaves_the_same_on_django_jobs_as_on_the_immediate_backend() -> None:
    ours = documented_usage()
    mail.outbox.clear()
    with override_settings(TASKS=IMMEDIATE):
        reference = documented_usage()
    assert ours == reference
    assert ours[:2] == [Status.SUCCESSFUL, 1] and ours[-2] == 1
    assert ours[-1] == ["You have a message", "Urgent", "Context"]
