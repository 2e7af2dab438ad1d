"""What the state machine's model found, each kept as the shortest sequence that shows it.

Those marked ``xfail`` break a rule of workflows or operators' actions that is being fixed
(each reason says which); they pass once it is.
"""

from __future__ import annotations

import pytest

import django_jobs
from django_jobs import ActionRefused, Step
from django_jobs.models import Job
from django_jobs.testing import run_one
from testproject.testjobs.jobs import MODEL_SCRIPT
from tests.model.shapes import PLAIN

pytestmark = pytest.mark.django_db

OPERATOR = {"reason": "the model says so", "actor": "model-operator"}


def jobs_of(workflow_id: int) -> list[Job]:
    return list(Job.objects.filter(workflow_id=workflow_id).order_by("step__position"))


def fails(job: Job) -> None:
    """Run ``job`` (the next claimable) and have it fail for good."""
    MODEL_SCRIPT[job.id] = "permanent"
    ran = run_one()
    assert ran is not None and (ran.id, ran.status) == (job.id, "failed")


@pytest.mark.xfail(
    strict=True,
    reason="being fixed: an operator's retry of a step whose condition no longer holds is refused",
)
def test_a_retry_of_a_step_its_failed_predecessor_stopped_is_refused() -> None:
    first, second = jobs_of(
        django_jobs.enqueue_chain(Step(PLAIN, {}, queue="emails"), Step(PLAIN, {}, queue="emails")).id
    )
    fails(first)
    assert Job.objects.get(id=second.id).status == "cancelled"  # stopped by its chain
    with pytest.raises(ActionRefused):
        django_jobs.retry(second.id, **OPERATOR)
    assert Job.objects.get(id=second.id).status == "cancelled"
