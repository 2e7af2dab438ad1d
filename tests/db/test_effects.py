"""Processed effects, compare-and-set, and the property: whatever the crashes, one effect."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs import ErrorCode, compare_and_set, enqueue, once
from django_jobs.maintenance import reaper
from django_jobs.models import Job, ProcessedEffect
from django_jobs.runtime import outcomes
from django_jobs.runtime.executor import execute
from django_jobs.runtime.lease import Lease
from django_jobs.states import JobStatus
from django_jobs.transitions import ClaimStatement, claim
from testproject.testjobs.models import EffectLog

pytestmark = pytest.mark.django_db(transaction=True)


def test_once_runs_an_effect_the_first_time_only() -> None:
    for _ in range(3):
        with once("welcome:user:1") as first_time:
            if first_time:
                EffectLog.objects.create(key="welcome:user:1", execution_id=uuid.uuid4())
    assert EffectLog.objects.count() == 1


def test_once_rolls_back_the_key_with_a_failed_effect() -> None:
    with pytest.raises(RuntimeError), once("report:7") as first_time:
        assert first_time
        EffectLog.objects.create(key="report:7", execution_id=uuid.uuid4())
        raise RuntimeError("the effect failed half-way")
    assert not ProcessedEffect.objects.exists() and not EffectLog.objects.exists()
    with once("report:7") as first_time:
        assert first_time  # the next attempt is not wrongly blocked


def test_once_inside_an_outer_transaction_is_part_of_it() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        with once("k") as first_time:
            assert first_time
        raise RuntimeError
    assert not ProcessedEffect.objects.exists()


def test_once_refuses_bad_keys() -> None:
    with pytest.raises(ValueError, match="effect key"), once(""):
        pass


def test_compare_and_set_moves_only_from_the_expected_state() -> None:
    job = enqueue("test.noop", {})
    rows = Job.objects.filter(id=job.id)
    assert compare_and_set(rows, "queue", "default", "moved", priority=5)
    assert not compare_and_set(rows, "queue", "default", "again")  # an earlier run moved it
    job.refresh_from_db()
    assert (job.queue, job.priority) == ("moved", 5)


CRASH_POINTS = st.sampled_from(["before_effect", "after_effect", "none"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(CRASH_POINTS, max_size=4), lose_completion=st.booleans())
def test_effect_happens_exactly_once_whatever_the_crashes(plan: list[str], lose_completion: bool) -> None:
    """Each execution may crash before its effect, after it, or lose its completion write;
    the recovery path (reaper, retry) then runs again. The effect count is always 1."""
    order = uuid.uuid4().hex
    job = enqueue(
        "test.invoice", {"order": order, "crash_plan": plan, "crash_by": "exception"}, max_attempts=20
    )
    statement = ClaimStatement("prop", None, {"test.invoice": 1})
    completion_lost_once = False
    for _ in range(len(plan) + 3):
        claims = [c for c in claim(statement, 10) if c.id == job.id]
        if not claims:
            break
        current = claims[0]
        finished = execute(current, Lease(current.id, current.execution_id, 60.0))
        # A SimulatedCrash stands for the process dying: nothing is written, the lease will expire.
        crashed = finished.error_code == ErrorCode.BASE_EXCEPTION and "SimulatedCrash" in str(finished.error)
        if not crashed and finished.happened is not None:
            if lose_completion and not completion_lost_once:
                completion_lost_once = True  # effect done, acknowledgement lost (e.g. the DB blipped)
            else:
                outcomes.write([finished])
        if Job.objects.get(id=job.id).status == JobStatus.RUNNING:
            # Build the state "lease expired" (the execution is gone) and let the reaper act.
            Job.objects.filter(id=job.id).update(lease_expires_at=Job.objects.get(id=job.id).started_at)
            assert reaper.recover() == {"pending": 1}
            Job.objects.filter(id=job.id).update(available_at=Job.objects.get(id=job.id).created_at)

    assert Job.objects.get(id=job.id).status == JobStatus.COMPLETED
    assert EffectLog.objects.filter(key=f"invoice:order:{order}").count() == 1
