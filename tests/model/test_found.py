"""What the state machine's model found, each kept as the shortest sequence that shows it.

Each broke a rule of workflows, operators' actions, retention or restore holds before it was
fixed.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

import django_jobs
from django_jobs import Step
from django_jobs.console import restore_holds
from django_jobs.maintenance import pruner
from django_jobs.models import Job, JobEvent
from django_jobs.testing import run_one
from django_jobs.transitions import KeyHeld
from testproject.testjobs.jobs import MODEL_SCRIPT
from tests.model import driver
from tests.model.shapes import PLAIN, REVIEW

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean() -> None:
    # Rows a transactional test interrupted may have left behind; rolled back with the test.
    driver.clean_database()


OPERATOR = {"reason": "the model says so", "actor": "model-operator"}


def jobs_of(workflow_id: int) -> list[Job]:
    return list(Job.objects.filter(workflow_id=workflow_id).order_by("step__position"))


def fails(job: Job) -> None:
    """Run ``job`` (the next claimable) and have it fail for good."""
    MODEL_SCRIPT[job.id] = "permanent"
    ran = run_one(queues=[job.queue])
    assert ran is not None and (ran.id, ran.status) == (job.id, "failed")


def test_a_retry_of_a_step_its_failed_predecessor_stopped_waits_and_is_never_claimed() -> None:
    first, second = jobs_of(
        django_jobs.enqueue_chain(Step(PLAIN, {}, queue="emails"), Step(PLAIN, {}, queue="emails")).id
    )
    fails(first)
    assert Job.objects.get(id=second.id).status == "cancelled"  # stopped by its chain
    django_jobs.retry(second.id, **OPERATOR)
    assert Job.objects.get(id=second.id).status == "waiting"  # for a retry of the failed step
    assert run_one() is None


def completes(job: Job) -> None:
    ran = run_one()
    assert ran is not None and (ran.id, ran.status) == (job.id, "completed")


def test_retention_prunes_no_part_of_a_workflow_whose_failed_step_is_kept() -> None:
    first, second = jobs_of(
        django_jobs.enqueue_chain(Step(PLAIN, {}, queue="emails"), Step(PLAIN, {}, queue="emails")).id
    )
    fails(first)  # failed jobs are kept for ever; the step it stopped is cancelled
    Job.objects.filter(id__in=[first.id, second.id]).update(finished_at=Now() - dt.timedelta(days=40))
    pruner.run_once(budget=30)
    assert set(Job.objects.filter(workflow_id=first.workflow_id).values_list("id", flat=True)) == {
        first.id,
        second.id,
    }


def test_retention_prunes_no_part_of_a_workflow_with_a_job_kept_longer() -> None:
    workflow = django_jobs.enqueue_group([Step(PLAIN, {}, queue="emails"), Step(PLAIN, {}, queue="emails")])
    done, cancelled = jobs_of(workflow.id)
    django_jobs.cancel(cancelled.id, **OPERATOR)
    completes(done)
    # Past the completed jobs' 7 days, not the cancelled jobs' 30.
    Job.objects.filter(workflow_id=workflow.id).update(finished_at=Now() - dt.timedelta(days=10))
    pruner.run_once(budget=30)
    assert set(Job.objects.filter(workflow_id=workflow.id).values_list("id", flat=True)) == {
        done.id,
        cancelled.id,
    }


def test_a_restore_release_settles_a_waiting_step_of_an_external_type() -> None:
    _, waiting = jobs_of(
        django_jobs.enqueue_chain(Step(PLAIN, {}, queue="emails"), Step(REVIEW, {}, queue="emails")).id
    )
    # Enqueued before the restore.
    Job.objects.filter(workflow_id=waiting.workflow_id).update(created_at=Now() - dt.timedelta(minutes=5))
    hold = restore_holds.declare(actor="ops", reason="restored last night's backup")
    restore_holds.release(actor="ops", reason="providers checked", hold_id=hold)
    assert JobEvent.objects.filter(job_id=waiting.id, details__restore_hold=hold).exists()


def test_retrying_a_cancelled_callback_and_its_failed_member_ends_the_same_in_either_order() -> None:
    ended = {}
    for order, queue in (("callback first", "emails"), ("member first", "reports")):
        workflow = django_jobs.enqueue_group(
            [Step(PLAIN, {}, queue=queue)], on_complete=Step(PLAIN, {}, queue=queue)
        )
        member, callback = jobs_of(workflow.id)
        fails(member)
        assert Job.objects.get(id=callback.id).status == "pending"  # due: its member ended
        django_jobs.cancel(callback.id, **OPERATOR)
        first, second = (callback, member) if order == "callback first" else (member, callback)
        django_jobs.retry(first.id, **OPERATOR)
        django_jobs.retry(second.id, **OPERATOR)
        ended[order] = (Job.objects.get(id=member.id).status, Job.objects.get(id=callback.id).status)
    assert ended["callback first"] == ended["member first"], ended


def test_cancelling_the_job_before_a_restored_step_parks_the_step_and_never_runs_it() -> None:
    ended = {}
    for order in ("step first", "member first"):
        workflow = django_jobs.enqueue_group([Step(PLAIN, {}, queue="emails")], on_complete=Step(REVIEW, {}))
        member, step = jobs_of(workflow.id)
        Job.objects.filter(workflow_id=workflow.id).update(created_at=Now() - dt.timedelta(minutes=5))
        hold = restore_holds.declare(actor="ops", reason="restored last night's backup")
        restore_holds.release(actor="ops", reason="providers checked", hold_id=hold)
        assert Job.objects.get(id=step.id).last_error_code == "RESTORED"
        if order == "step first":
            django_jobs.cancel(step.id, **OPERATOR)
            django_jobs.cancel(member.id, **OPERATOR)
        else:
            django_jobs.cancel(member.id, **OPERATOR)  # makes the on_complete step due: parked
            with pytest.raises(django_jobs.ActionRefused, match=r"parked for review.*resolve it"):
                django_jobs.cancel(step.id, **OPERATOR)
        ended[order] = Job.objects.get(id=step.id).status
        assert run_one() is None
    assert ended == {"step first": "cancelled", "member first": "needs_review"}


def test_a_retry_that_would_resume_a_step_two_stops_away_whose_key_is_taken_is_refused_naming_it() -> None:
    first, second, third = jobs_of(
        django_jobs.enqueue_chain(
            Step(PLAIN, {}, queue="emails"), Step(PLAIN, {}, queue="emails"),
            Step(PLAIN, {}, queue="emails", unique_key="k1"),
        ).id
    )  # fmt: skip
    django_jobs.cancel(first.id, **OPERATOR)
    assert [Job.objects.get(id=j.id).status for j in (second, third)] == ["cancelled", "cancelled"]
    holder = django_jobs.enqueue(PLAIN, {}, queue="emails", unique_key="k1")  # the key is free
    with pytest.raises(KeyHeld, match=rf"resume job {third.id}\b.*job {holder.id} holds"):
        django_jobs.retry(first.id, **OPERATOR)
    assert [Job.objects.get(id=j.id).status for j in (first, second, third)] == ["cancelled"] * 3
