"""Article test 13: payloads outlive the code that wrote them, in both directions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_jobs import JobContext, enqueue_many, job
from django_jobs.models import Job
from django_jobs.registry import JobType, registry
from django_jobs.states import JobStatus
from django_jobs.testing import run_jobs
from testproject.testjobs import jobs as v3_code
from testproject.testjobs.models import BusinessRow
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def v4_deployed() -> Iterator[None]:
    """Registers test.versioned at version 4 (a newer deploy) for the duration of the test."""
    current = registry.get("test.versioned")
    assert current is not None and current.version == 3
    registry.unregister("test.versioned")

    @job("test.versioned", version=4, upcasters={**current.upcasters, 3: lambda p: {**p, "v4": True}})
    def versioned_v4(ctx: JobContext, payload: dict[str, Any]) -> None:
        BusinessRow.objects.create(
            key=f"v4:{ctx.job_id}:{sorted(payload)}", job_id=ctx.job_id, execution_id=ctx.execution_id
        )

    yield
    registry.unregister("test.versioned")
    registry.register(current)


def test_13_old_payloads_are_upcast_after_the_handler_moved_on() -> None:
    v1 = JobFactory.create_batch(20, type="test.versioned", version=1, payload={"v1": True})
    v2 = JobFactory(type="test.versioned", version=2, payload={"v1": True, "v2": True})
    run_jobs()
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 21
    keys = set(BusinessRow.objects.values_list("key", flat=True))
    assert keys == {f"versioned:{j.id}:['v1', 'v2', 'v3']" for j in [*v1, v2]}


def test_13_a_newer_payload_waits_for_a_newer_worker(v4_deployed: None) -> None:
    newer = JobFactory(type="test.versioned", version=4, payload={"v4": True})
    older = JobFactory(type="test.versioned", version=1, payload={"v1": True})
    v4_code = registry.get("test.versioned")
    assert v4_code is not None

    # A worker still running the v3 code: it never claims the v4 job, and never fails it.
    registry.unregister("test.versioned")
    registry.register(
        JobType(
            name="test.versioned", handler=v3_code.versioned, version=3, upcasters=v3_code.VERSIONED_UPCASTERS
        )
    )
    run_jobs()
    assert Job.objects.get(id=newer.id).status == JobStatus.PENDING
    assert Job.objects.get(id=newer.id).attempts == 0
    assert Job.objects.get(id=older.id).status == JobStatus.COMPLETED

    # The v4 deploy arrives: its worker takes the job.
    registry.unregister("test.versioned")
    registry.register(v4_code)
    run_jobs()
    assert Job.objects.get(id=newer.id).status == JobStatus.COMPLETED
    assert BusinessRow.objects.filter(key=f"v4:{newer.id}:['v4']").exists()


def test_13_an_undecodable_payload_fails_alone_not_the_backlog() -> None:
    good = enqueue_many("test.versioned", [{"n": i} for i in range(50)])
    Job.objects.filter(id__in=[j.id for j in good]).update(version=1)
    broken = JobFactory(type="test.versioned", version=1, payload=["not", "an", "object"])
    run_jobs()
    broken.refresh_from_db()
    assert (broken.status, broken.last_error_code, broken.attempts) == (
        JobStatus.FAILED,
        "PAYLOAD_INVALID",
        1,
    )
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 50
