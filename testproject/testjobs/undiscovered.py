"""A task outside the modules every process imports at start-up (each app's jobs.py and
tasks.py): a process that imports this module can enqueue it, a worker that does not never
claims it. ``explainjob`` must say where workers look (tests/db/test_checkjobs.py)."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def send_reminder(customer_id: int) -> None:
    """Would remind a customer; only ever enqueued, never run, by the tests."""
