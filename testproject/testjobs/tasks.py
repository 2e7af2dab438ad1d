"""Tasks of Django's Tasks framework, as a project writes them; run on django_jobs by the tests.

``task`` comes from ``django.tasks`` on Django ≥ 6.0 and from the ``django_tasks`` backport on
Django 5.2: the functions below are the same on both.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from django.core.mail import send_mail

from django_jobs import PermanentError, RetryableError, SkipJob
from django_jobs.models import Job
from testproject.testjobs.models import BusinessRow

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def noop() -> None:
    """Does nothing: what the benchmarks drain."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task(takes_context=True)
def fails_then_succeeds(context: Any, failures: int) -> int:
    """Raises on its first ``failures`` attempts, then returns the attempt that succeeded."""
    if context.attempt <= failures:
        raise RuntimeError(f"attempt {context.attempt} fails (api_key=sk-live-123456789)")
    return int(context.attempt)


@task(takes_context=True)
def uses_job_context(context: Any, order: int) -> dict[str, Any]:
    """Reaches django_jobs' own context through the task's: keys, effects, heartbeat."""
    job = context.job
    job.heartbeat()
    with job.effect(f"task-order:{order}") as first_time:
        if first_time:
            BusinessRow.objects.create(
                key=f"task-order:{order}", job_id=job.job_id, execution_id=job.execution_id
            )
    return {"key": job.idempotency_key("charge"), "attempt": context.attempt, "job_attempt": job.attempt}


@task
def gives_up() -> None:
    raise PermanentError("the account is closed", code="ACCOUNT_CLOSED")


@task
def retries_until_exhausted() -> None:
    raise RetryableError("provider answered 503", code="PROVIDER_5XX")


@task
def not_applicable() -> None:
    raise SkipJob("the order was deleted")


@task(takes_context=True)
def fails_each_run(context: Any) -> None:
    """Fails for good, saying which run of it this was (it leaves one row per run)."""
    job = context.job
    runs = BusinessRow.objects.filter(key__startswith=f"task-run:{job.job_id}:").count() + 1
    BusinessRow.objects.create(key=f"task-run:{job.job_id}:{runs}", job_id=job.job_id,
                               execution_id=job.execution_id)  # fmt: skip
    raise PermanentError(f"run {runs} failed (password=hunter2)")


@task(takes_context=True)
def taken_over(context: Any) -> str:
    """Returns after its job was taken over by another execution, as when its lease expired and
    the reaper handed it on: this execution's outcome cannot be written."""
    Job.objects.filter(id=context.job.job_id).update(execution_id=uuid.uuid4())
    return "too late"


@task
def returns_a_set() -> Any:
    return {1, 2, 3}


@task
def returns(value: Any) -> Any:
    return value


@task
async def async_multiply(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@task(takes_context=True)
def slow(context: Any, seconds: float) -> str:
    """Marks each start (one row per attempt), then works for ``seconds`` in small steps."""
    job = context.job
    BusinessRow.objects.create(key=f"task-started:{job.job_id}:{job.attempt}", job_id=job.job_id,
                               execution_id=job.execution_id)  # fmt: skip
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
        job.raise_if_cancelled()
    return "done"


# ---- the reference backend's documented usage, unchanged ----------------------------------------
# A project moving from django-tasks' database backend changes TASKS' BACKEND and nothing here.


@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True)
def email_users_with_context(context: Any, emails: list[str], subject: str, message: str) -> int:
    print(f"Attempt {context.attempt} to send user email. Task result id: {context.task_result.id}.")
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)
