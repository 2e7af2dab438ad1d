"""Durable jobs where they meet the other writers of job state: a workflow's chain and group, a
bulk cancel and an operator's retry, retention, and a restore hold. In each, a recorded step's
effect happens once, and the job is always somewhere the system can say."""

from __future__ import annotations

import datetime as dt

import pytest

import django_jobs
from django_jobs import JobFilter, Step, enqueue, enqueue_chain, enqueue_group
from django_jobs.console import actions, bulk, bulk_runner, durable_actions, restore_holds
from django_jobs.durable import give_key
from django_jobs.maintenance import pruner
from django_jobs.models import Job, JobEvent, JobStep
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import assert_steps, run_durable, run_one, wake, where
from testproject.testjobs.models import EffectLog

pytestmark = pytest.mark.django_db

WAIT_THEN_SHIP = [["step", "charge"], ["wait", "paid", 3600], ["step", "ship"]]
SLEEP_BETWEEN = [["step", "charge"], ["sleep", 3600], ["step", "ship"]]


def effects(run: str) -> dict[str, int]:
    keys = EffectLog.objects.filter(key__startswith=f"{run}:").values_list("key", flat=True)
    counted: dict[str, int] = {}
    for key in keys:
        name = key.split(":", 1)[1]
        counted[name] = counted.get(name, 0) + 1
    return counted


def enqueued_before_the_hold(script: list[list[object]], run: str) -> Job:
    """An external durable job run to its sleep, enqueued a minute ago: in a test's transaction
    the database's clock stands still, and a job enqueued at the hold's very moment is not one
    the hold keeps."""
    job = run_durable(enqueue("test.durable_external", {"run": run, "script": script}))
    Job.objects.filter(id=job.id).update(created_at=job.created_at - dt.timedelta(minutes=1))
    return job


def status(job: Job | int) -> str:
    return Job.objects.get(id=job if isinstance(job, int) else job.id).status


def test_a_durable_chain_step_that_waits_holds_the_next_step_until_its_signal_ends_it() -> None:
    flow = enqueue_chain(
        Step("test.durable", {"run": "chain", "script": WAIT_THEN_SHIP}), Step("test.noop", {})
    )
    first, then = Job.objects.filter(workflow_id=flow.id).order_by("id")
    give_key(first.id, "chain:1")
    assert run_durable(first).status == JobStatus.PENDING and where(first).kind == "wait"  # type: ignore[union-attr]
    assert status(then) == JobStatus.WAITING  # parked is not ended: the next step keeps waiting

    django_jobs.signal("chain:1", "paid", {"amount": 3})
    assert run_durable(first).status == JobStatus.COMPLETED
    assert status(then) == JobStatus.PENDING  # due, as after any completed step
    assert run_one() is not None and status(then) == JobStatus.COMPLETED
    assert effects("chain") == {"charge": 1, "ship": 1}


def test_a_group_member_asleep_keeps_the_callback_waiting_until_it_wakes_and_ends() -> None:
    flow = enqueue_group(
        [Step("test.durable", {"run": "group", "script": SLEEP_BETWEEN}), Step("test.noop", {})],
        on_complete=Step("test.noop", {"callback": True}),
    )
    jobs = list(Job.objects.filter(workflow_id=flow.id).order_by("id"))
    sleeper, callback = jobs[0], jobs[-1]
    run_durable(sleeper)
    assert run_one(types=["test.noop"]) is not None  # the other member ends
    assert status(callback) == JobStatus.WAITING  # a sleeping member has not ended
    wake(sleeper)
    assert run_durable(sleeper).status == JobStatus.COMPLETED
    assert status(callback) == JobStatus.PENDING
    assert effects("group") == {"charge": 1, "ship": 1}


def test_a_bulk_cancel_of_a_sleeping_job_then_a_retry_sleeps_out_the_rest_and_never_charges_twice() -> None:
    job = run_durable(enqueue("test.durable", {"run": "bulk", "script": SLEEP_BETWEEN}))
    until = where(job).until  # type: ignore[union-attr]
    operation = bulk.cancel_matching(JobFilter(type="test.durable"), reason="wrong batch", actor="ops")
    while bulk_runner._one_batch(operation.id).acted:
        pass
    assert status(job) == JobStatus.CANCELLED
    with pytest.raises(django_jobs.ActionRefused):  # a cancelled job does not sleep: nothing to wake
        durable_actions.wake(job.id, reason="try", actor="ops")

    actions.retry(job.id, reason="right batch after all", actor="ops")
    replayed = run_durable(job)  # the step replays from its record; the sleep is still ahead
    parked = where(replayed)
    assert replayed.status == JobStatus.PENDING and parked is not None and parked.until == until
    assert effects("bulk") == {"charge": 1}
    durable_actions.wake(job.id, reason="the customer asked", actor="ops")
    assert run_durable(job).status == JobStatus.COMPLETED
    assert effects("bulk") == {"charge": 1, "ship": 1}
    assert_steps(job, ["charge", "sleep#2", "ship"])


def test_retention_never_takes_a_sleeping_or_waiting_job_nor_its_records() -> None:
    asleep = run_durable(enqueue("test.durable", {"run": "kept1", "script": SLEEP_BETWEEN}))
    waiting = run_durable(enqueue("test.durable", {"run": "kept2", "script": WAIT_THEN_SHIP}))
    Job.objects.filter(id__in=[asleep.id, waiting.id]).update(created_at=asleep.created_at.replace(year=2020))
    pruner.prune()
    assert Job.objects.filter(id__in=[asleep.id, waiting.id]).count() == 2
    assert JobStep.objects.filter(job_id__in=[asleep.id, waiting.id]).count() == 4


def test_a_restore_hold_keeps_a_woken_external_durable_job_from_starting_until_released() -> None:
    job = enqueued_before_the_hold(SLEEP_BETWEEN, "held")
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    durable_actions.wake(job.id, reason="wake it under the hold", actor="ops")
    assert run_one() is None and status(job) == JobStatus.PENDING  # due, and held all the same
    restore_holds.release(actor="ops", reason="the provider shows the charge", not_done=[job.id])
    assert run_durable(job).status == JobStatus.COMPLETED
    assert effects("held") == {"charge": 1, "ship": 1}  # the recorded charge was not run again
    kinds = list(JobEvent.objects.filter(job=job).order_by("id").values_list("kind", flat=True))
    assert kinds == [EventKind.SUSPENDED, EventKind.WOKEN, EventKind.RESTORE_RELEASED]


def test_a_restore_hold_released_unanswered_parks_a_sleeping_external_durable_job_for_review() -> None:
    job = enqueued_before_the_hold(SLEEP_BETWEEN, "parked")
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    restore_holds.release(actor="ops", reason="nobody checked")
    assert status(job) == JobStatus.NEEDS_REVIEW  # its type cannot reconcile: a person decides
    assert where(job) is None  # parked for review, it neither sleeps nor waits
    actions.retry(job.id, reason="checked: nothing was shipped", actor="ops")
    assert where(job) is not None and run_durable(job).status == JobStatus.PENDING  # asleep again
    wake(job)
    assert run_durable(job).status == JobStatus.COMPLETED
    assert effects("parked") == {"charge": 1, "ship": 1}
