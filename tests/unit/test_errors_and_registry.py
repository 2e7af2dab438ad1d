from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_jobs import (
    ErrorCode,
    JobContext,
    PermanentError,
    RateLimitedError,
    RetryableError,
    SkipJob,
    job,
)
from django_jobs.errors import OutcomeKind, classify
from django_jobs.registry import AlreadyRegistered, registry


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (RetryableError("x", code="PROVIDER_5XX"), OutcomeKind.RETRY, "PROVIDER_5XX"),
        (RetryableError("x"), OutcomeKind.RETRY, ErrorCode.UNKNOWN),
        (PermanentError("x", code="AUTH_FAILED"), OutcomeKind.FAIL, "AUTH_FAILED"),
        (RateLimitedError("x", retry_after=3), OutcomeKind.RETRY, ErrorCode.RATE_LIMITED),
        (SkipJob("gone"), OutcomeKind.SKIP, ErrorCode.SKIPPED),
        (TimeoutError(), OutcomeKind.RETRY, ErrorCode.NETWORK_TIMEOUT),
        (ConnectionResetError(), OutcomeKind.RETRY, ErrorCode.NETWORK_ERROR),
        (KeyError("x"), OutcomeKind.RETRY, ErrorCode.UNKNOWN),
    ],
)
def test_classify(exc: Exception, kind: OutcomeKind, code: str) -> None:
    result = classify(exc)
    assert (result.kind, result.code) == (kind, code)


def test_rate_limited_carries_its_retry_after() -> None:
    assert classify(RateLimitedError("x", retry_after=7.5)).retry_after == 7.5
    with pytest.raises(ValueError, match="retry_after"):
        RateLimitedError("x", retry_after=-1)


@pytest.fixture
def scratch_names() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


def test_job_registers_a_handler_with_its_policy(scratch_names: list[str]) -> None:
    scratch_names.append("scratch.one")

    @job("scratch.one", queue="mail", priority=10, max_attempts=7, timeout=30)
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    job_type = registry.get("scratch.one")
    assert job_type is not None
    assert job_type.handler is handler
    assert (job_type.default_queue, job_type.priority, job_type.default_max_attempts) == ("mail", 10, 7)
    assert handler.job_name == "scratch.one"  # type: ignore[attr-defined]


def test_a_name_cannot_be_taken_by_another_handler(scratch_names: list[str]) -> None:
    scratch_names.append("scratch.two")

    @job("scratch.two")
    def first(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    with pytest.raises(AlreadyRegistered, match=r"scratch\.two"):

        @job("scratch.two")
        def second(ctx: JobContext, payload: dict[str, Any]) -> None: ...


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"priority": 101}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"version": 0}, "version"),
        ({"queue": "bad queue"}, "queue"),
    ],
)
def test_invalid_policies_fail_at_import_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        job("scratch.invalid", **kwargs)


@pytest.mark.parametrize("name", ["", "has space", "x" * 201, "quote'd"])
def test_invalid_type_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid job type name"):
        job(name)


def test_idempotency_key_is_stable_across_attempts() -> None:
    import uuid

    from django_jobs.context import Lease

    def lease() -> Lease:
        return Lease(42, uuid.uuid4(), 60.0)

    keys = {
        JobContext(
            job_id=42,
            type="billing.charge",
            queue="q",
            attempt=a,
            max_attempts=5,
            execution_id=uuid.uuid4(),
            lease=lease(),
        ).idempotency_key("charge")
        for a in (1, 2, 3)
    }
    assert keys == {"billing.charge:job-42:charge"}
    keyed = JobContext(
        job_id=42,
        type="billing.charge",
        queue="q",
        attempt=1,
        max_attempts=5,
        execution_id=uuid.uuid4(),
        unique_key="invoice:7",
        lease=lease(),
    )
    assert keyed.idempotency_key() == "billing.charge:invoice:7"
