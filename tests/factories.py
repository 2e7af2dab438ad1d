"""Build job rows in any state directly, without driving the lifecycle to get there."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import factory
from django.utils import timezone

from django_jobs.models import Job
from django_jobs.registry import registry
from django_jobs.states import JobStatus


class JobFactory(factory.django.DjangoModelFactory[Job]):
    class Meta:
        model = Job

    queue = "default"
    type = "test.noop"
    payload: Any = factory.LazyFunction(dict)
    status = JobStatus.PENDING
    max_attempts = 5
    # As enqueue() does: the type's policy for a lost execution is stored on the row.
    on_lost = factory.LazyAttribute(lambda job: _on_lost(job.type))
    on_lost_in_call = factory.LazyAttribute(lambda job: _on_lost_in_call(job.type))

    class Params:
        running = factory.Trait(
            status=JobStatus.RUNNING,
            attempts=1,
            worker_id="host:1:abc",
            execution_id=factory.LazyFunction(uuid.uuid4),
            started_at=factory.LazyFunction(timezone.now),
            heartbeat_at=factory.LazyFunction(timezone.now),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() + dt.timedelta(minutes=1)),
        )
        running_stale = factory.Trait(
            status=JobStatus.RUNNING,
            attempts=1,
            worker_id="host:1:abc",
            execution_id=factory.LazyFunction(uuid.uuid4),
            started_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(hours=1)),
            heartbeat_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(hours=1)),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=59)),
        )
        completed = factory.Trait(
            status=JobStatus.COMPLETED,
            attempts=1,
            completed_at=factory.LazyFunction(timezone.now),
            finished_at=factory.LazyFunction(timezone.now),
        )
        failed = factory.Trait(
            status=JobStatus.FAILED,
            attempts=5,
            last_error_code="UNKNOWN",
            last_error="RuntimeError: boom",
            failed_at=factory.LazyFunction(timezone.now),
            finished_at=factory.LazyFunction(timezone.now),
        )
        delayed = factory.Trait(
            available_at=factory.LazyFunction(lambda: timezone.now() + dt.timedelta(hours=1))
        )


def _on_lost_in_call(job_type: str) -> str | None:
    registered = registry.get(job_type)
    return registered.on_lost_in_call if registered is not None else None


def _on_lost(job_type: str) -> str:
    registered = registry.get(job_type)
    return registered.on_lost if registered is not None else "retry"
