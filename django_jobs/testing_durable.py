"""Helpers for testing durable jobs (docs/durable-jobs.md), public in ``django_jobs.testing``.

In a ``TestCase`` the database's clock stands still, so a sleep never ends by itself and a
wait never times out: ``run_durable`` (in ``django_jobs.testing``) runs a job to its next
sleep or wait (or its end), :func:`wake` ends its sleep now, :func:`deliver` sends it a
signal, and :func:`assert_steps` checks what it recorded. A wait's timeout needs time to
pass: test it in a ``TransactionTestCase`` with a short timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_jobs.durable import signal
from django_jobs.models import Job
from django_jobs.reads.durable import StepRecord, Suspension, steps, suspension
from django_jobs.transitions import durable as records


def wake(job: Job | int) -> None:
    """End the sleep of ``job`` now (by the database's clock): its next execution goes on past
    it. Raises ``AssertionError`` when it does not sleep."""
    job_id = job if isinstance(job, int) else job.pk
    if not records.wake(job_id):
        raise AssertionError(f"job {job_id} does not sleep")


def deliver(key: str, name: str, data: Any = None) -> bool:
    """``django_jobs.signal(key, name, data)``: what a webhook would send."""
    return signal(key, name, data)


def where(job: Job | int) -> Suspension | None:
    """Where ``job`` sleeps or waits, or None."""
    return suspension(job if isinstance(job, int) else job.pk)


def recorded_steps(job: Job | int) -> list[StepRecord]:
    """What ``job`` recorded, position by position (steps, sleeps and waits)."""
    return steps(job if isinstance(job, int) else job.pk)


def assert_steps(job: Job | int, names: Sequence[str], *, kinds: bool = False) -> None:
    """Assert that ``job`` recorded exactly ``names``, in order (sleeps are ``sleep#<n>``
    unless named). With ``kinds``, name each as ``kind:name`` (``step:charge``)."""
    found = [f"{s.kind}:{s.name}" if kinds else s.name for s in recorded_steps(job)]
    if found != list(names):
        job_id = job if isinstance(job, int) else job.pk
        raise AssertionError(f"job {job_id} recorded {found}, not {list(names)}")


__all__ = ["assert_steps", "deliver", "recorded_steps", "wake", "where"]
