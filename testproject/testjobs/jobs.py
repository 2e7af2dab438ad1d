"""Job types for the test suite. Each one misbehaves in a single, named way."""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from django_jobs import (
    Backoff,
    JobContext,
    PermanentError,
    RateLimitedError,
    RetryableError,
    SkipJob,
    job,
)
from testproject.testjobs.models import BusinessRow

FAST = Backoff(base=0.05, cap=0.2, jitter=0.5)


@job("test.noop")
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    pass


@job("test.record", backoff=FAST)
def record(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Writes one business row keyed by the payload; a second write violates UNIQUE."""
    BusinessRow.objects.create(key=payload["key"], job_id=ctx.job_id, execution_id=ctx.execution_id)


@job("test.flaky", backoff=FAST)
def flaky(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fails with a retryable error until attempt number payload["succeed_on"]."""
    if ctx.attempt < payload["succeed_on"]:
        raise RetryableError(f"temporary failure on attempt {ctx.attempt}", code="PROVIDER_5XX")


@job("test.permanent")
def permanent(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise PermanentError("the account does not exist", code="ENTITY_NOT_FOUND")


@job("test.poison", max_attempts=3, backoff=FAST)
def poison(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise ZeroDivisionError("division by zero in a corrupt file")


@job("test.skip")
def skip(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise SkipJob("the document was deleted")


@job("test.rate_limited", backoff=FAST)
def rate_limited(ctx: JobContext, payload: dict[str, Any]) -> None:
    if ctx.attempt == 1:
        raise RateLimitedError("slow down", retry_after=payload["retry_after"])


@job("test.leaky")
def leaky(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Raises an error whose text carries secrets, as HTTP clients' errors often do."""
    raise PermissionError(
        "request failed: headers={'Authorization': 'Bearer abc.def.ghi-secret-token'} "
        "url=https://svc:hunter2@api.example.com/v1?api_key=AKIAIOSFODNN7EXAMPLE password=hunter2"
    )


@job("test.in_transaction")
def in_transaction(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Records whether the handler was started inside a transaction."""
    BusinessRow.objects.create(
        key=f"in_atomic:{ctx.job_id}:{connection.in_atomic_block}:{connection.get_autocommit()}",
        job_id=ctx.job_id,
        execution_id=ctx.execution_id,
    )


@job("test.sleep", backoff=FAST)
def sleep(ctx: JobContext, payload: dict[str, Any]) -> None:
    time.sleep(payload.get("seconds", 0.1))


@job("test.versioned", version=3, upcasters={1: lambda p: {**p, "v2": True}, 2: lambda p: {**p, "v3": True}})
def versioned(ctx: JobContext, payload: dict[str, Any]) -> None:
    BusinessRow.objects.create(
        key=f"versioned:{ctx.job_id}:{sorted(payload)}", job_id=ctx.job_id, execution_id=ctx.execution_id
    )
