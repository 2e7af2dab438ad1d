"""Where a workflow meets the other writers of job state: an operator's retry and cancel (one
job, a multi-select in any order, a bulk operation), retention and ``cancel_workflow`` racing a
claim. Each rule lives in the arrow that crosses it (``transitions.manual_retry``, the triggers
of ``transitions.workflow_triggers``, ``transitions.workflow_retention``), so no writer steps
around it."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models.functions import Now

from django_jobs import Step, cancel, cancel_workflow, enqueue, enqueue_chain, enqueue_group, retry
from django_jobs.conf import jobs_settings
from django_jobs.console import bulk
from django_jobs.console.job_filter import JobFilter
from django_jobs.maintenance import pruner
from django_jobs.models import (
    Barrier,
    BulkOperation,
    BulkOperationJob,
    BulkOutcome,
    Job,
    JobEvent,
    Workflow,
    WorkflowStep,
)
from django_jobs.observe.diagnosis import explain
from django_jobs.observe.reasons import Reason
from django_jobs.runtime.worker import Worker
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_one, run_until_settled
from django_jobs.transitions import ActionRefused, KeyHeld, StepRefused, claim
from django_jobs.workflow_plan import LEAF_SIZE
from django_jobs.workflows import jobs_of
from testproject.testjobs.models import BusinessRow

pytestmark = pytest.mark.django_db(transaction=True)

RUNNING_EXECUTION = "00000000-0000-0000-0000-000000000001"


def step(key: str, **payload: Any) -> Step:
    return Step("test.step", {"key": key, **payload})


def summary(key: str, **options: Any) -> Step:
    return Step("test.summarise", {"key": key}, **options)


def status(job: Job | int) -> str:
    return str(Job.objects.get(id=job if isinstance(job, int) else job.id).status)


def role(workflow: Any, name: str) -> Job:
    return Job.objects.get(workflow_id=workflow.id, step__role=name)


def ran(key: str) -> bool:
    return BusinessRow.objects.filter(key=key).exists()


def hold_running(job: Job) -> None:
    """A worker holds ``job`` (its claim committed; the test plays the worker)."""
    Job.objects.filter(id=job.id).update(
        status=JobStatus.RUNNING, execution_id=RUNNING_EXECUTION, heartbeat_at=Now(),
        lease_expires_at=Now() + dt.timedelta(minutes=5),
    )  # fmt: skip


def age(workflow: Any, days: int) -> None:
    """Move every ended job of ``workflow`` ``days`` into the past."""
    Job.objects.filter(workflow_id=workflow.id).exclude(finished_at=None).update(
        finished_at=Now() - dt.timedelta(days=days)
    )


# ---- a retried step waits for what it waits for ----------------------------------------------


def test_a_step_retried_while_the_step_before_it_runs_waits_for_it_again() -> None:
    workflow = enqueue_chain(step("charge", n=1), step("ship", read_parent=True))
    charge, ship = jobs_of(workflow)
    hold_running(charge)
    assert cancel(ship.id, reason="hold shipping", actor="ops") == "cancelled"

    assert retry(ship.id, reason="ship after all", actor="ops") == "cancelled"

    assert status(ship) == JobStatus.WAITING
    event = JobEvent.objects.filter(job_id=ship.id, kind=EventKind.MANUAL_RETRY).get()
    assert (event.from_status, event.to_status) == (JobStatus.CANCELLED, JobStatus.WAITING)
    assert run_one() is None  # nothing is due: the charge still runs
    # The charge completes (its worker's outcome): the shipment becomes due, once, and reads it.
    Job.objects.filter(id=charge.id).update(
        status=JobStatus.COMPLETED, finished_at=Now(), return_value={"n": 1}
    )
    shipped = run_one()
    assert shipped is not None and shipped.id == ship.id
    assert Job.objects.get(id=ship.id).return_value == {"n": None, "parent": {"n": 1}}
    assert JobEvent.objects.filter(job_id=ship.id, kind=EventKind.DUE).count() == 1


def test_a_step_after_a_failed_one_retried_alone_waits_for_that_ones_retry_and_says_so() -> None:
    workflow = enqueue_chain(step("a", fail=True), step("b"))
    run_until_settled(in_thread=True)
    a, b = jobs_of(workflow)
    assert (status(a), status(b)) == (JobStatus.FAILED, JobStatus.CANCELLED)

    assert retry(b.id, reason="try b alone", actor="ops") == "cancelled"

    assert status(b) == JobStatus.WAITING and run_one() is None  # b never runs before a
    why = explain(b.id)
    assert why.reason == Reason.WAITING
    assert f"job {a.id} (test.step, failed) ended without succeeding" in why.sentence
    assert dict(why.evidence)["to retry"] == f"job {a.id} (test.step, failed)"
    with pytest.raises(TimeoutError, match=rf"jobs {a.id} failed or were cancelled; retry them"):
        run_until_settled(in_thread=True)

    Job.objects.filter(id=a.id).update(payload={"key": "a-fixed"})
    retry(a.id, reason="fixed", actor="ops")
    run_until_settled(in_thread=True)
    assert (status(a), status(b)) == (JobStatus.COMPLETED, JobStatus.COMPLETED) and ran("b")


def test_a_step_retried_alone_is_stopped_again_when_the_job_before_it_fails_again() -> None:
    workflow = enqueue_chain(step("a", fail=True), step("b"))
    run_until_settled(in_thread=True)
    a, b = jobs_of(workflow)
    retry(b.id, reason="try b alone", actor="ops")
    retry(a.id, reason="once more", actor="ops")
    run_until_settled(in_thread=True)  # a fails again
    assert (status(a), status(b)) == (JobStatus.FAILED, JobStatus.CANCELLED) and not ran("b")
    assert WorkflowStep.objects.get(job_id=b.id).stopped  # its workflow stopped it: a's retry resumes it


def test_on_failure_is_not_retried_when_every_member_succeeded() -> None:
    workflow = enqueue_group([step("m0"), step("m1")], on_failure=summary("bad"))
    run_until_settled(in_thread=True)
    on_failure = role(workflow, "on_failure")
    with pytest.raises(StepRefused, match="every one of them succeeded: no retry can make it due"):
        retry(on_failure.id, reason="run it anyway", actor="ops")
    assert status(on_failure) == JobStatus.CANCELLED and not ran("bad")


# ---- a set of retries ends the same in any order --------------------------------------------


def _retry_in_order(first: int, second: int) -> list[str]:
    refusals = []
    for job_id in (first, second):
        try:
            retry(job_id, reason="provider is back", actor="ops")
        except ActionRefused as refused:
            refusals.append(str(refused))
    return refusals


@pytest.mark.parametrize("callback_first", [True, False], ids=["on_success first", "member first"])
def test_retrying_a_failed_member_and_its_stopped_on_success_ends_the_same_in_either_order(
    callback_first: bool,
) -> None:
    workflow = enqueue_group(
        [step("m0"), step("m1", fail=True)], on_success=summary("ok"), on_failure=summary("bad")
    )
    run_until_settled(in_thread=True)
    member = Job.objects.get(workflow_id=workflow.id, status=JobStatus.FAILED)
    on_success = role(workflow, "on_success")

    order = (on_success.id, member.id) if callback_first else (member.id, on_success.id)
    _retry_in_order(*order)  # the callback's second retry, if any, is refused: it waits already

    assert (status(member), status(on_success)) == (JobStatus.PENDING, JobStatus.WAITING)
    run_until_settled(in_thread=True)  # the member fails again
    assert (status(member), status(on_success)) == (JobStatus.FAILED, JobStatus.CANCELLED)
    assert not ran("ok")


def test_retry_all_matching_on_a_large_group_does_not_run_on_success_beside_a_member_that_fails_again() -> (
    None
):
    members = [step("m0", fail=True)] + [step(f"m{i}") for i in range(1, LEAF_SIZE + 6)]  # a tree
    workflow = enqueue_group(members, on_success=summary("ok"), on_failure=summary("bad"))
    run_until_settled(in_thread=True)
    on_success = role(workflow, "on_success")
    assert status(on_success) == JobStatus.CANCELLED

    # The failed member and the stopped on_success in one batch: the leaf it refills is read at
    # once, though the tree's top counts it only at commit.
    bulk.retry_matching(JobFilter(workflow=workflow.id), reason="provider is back", actor="ops")
    run_until_settled(in_thread=True)

    assert status(Job.objects.get(workflow_id=workflow.id, payload__key="m0")) == JobStatus.FAILED
    assert status(on_success) == JobStatus.CANCELLED
    assert not ran("ok")
    assert JobEvent.objects.filter(job_id=on_success.id, kind=EventKind.DUE).count() == 0


@pytest.mark.parametrize("callback_first", [True, False], ids=["callback first", "member first"])
def test_retrying_a_cancelled_due_callback_and_its_failed_member_ends_the_same_in_either_order(
    callback_first: bool,
) -> None:
    workflow = enqueue_group([step("m0", fail=True)], on_complete=summary("done"))
    member = jobs_of(workflow)[0]
    assert run_one() is not None and status(member) == JobStatus.FAILED
    on_complete = role(workflow, "on_complete")
    assert status(on_complete) == JobStatus.PENDING  # due: its member ended
    assert cancel(on_complete.id, reason="not now", actor="ops") == "cancelled"

    order = (on_complete.id, member.id) if callback_first else (member.id, on_complete.id)
    assert _retry_in_order(*order) == []

    assert (status(member), status(on_complete)) == (JobStatus.PENDING, JobStatus.WAITING)
    ran = run_one()  # the member, not the callback beside it
    assert ran is not None and ran.id == member.id
    assert status(on_complete) == JobStatus.PENDING  # due again, once the member ended


def test_a_due_step_not_started_waits_again_when_a_job_it_waits_for_is_retried() -> None:
    workflow = enqueue_group([step("m0", fail=True), step("m1")], on_complete=summary("done"))
    run_one()
    run_one()
    on_complete = role(workflow, "on_complete")
    assert status(on_complete) == JobStatus.PENDING
    failed = Job.objects.get(workflow_id=workflow.id, status=JobStatus.FAILED)

    retry(failed.id, reason="provider back", actor="ops")

    assert status(on_complete) == JobStatus.WAITING
    resumed = JobEvent.objects.filter(job_id=on_complete.id, kind=EventKind.RESUMED).get()
    assert (resumed.from_status, resumed.to_status) == (JobStatus.PENDING, JobStatus.WAITING)
    run_until_settled(in_thread=True)
    assert Job.objects.get(id=on_complete.id).return_value["summary"] == {"completed": 1, "failed": 1}
    assert JobEvent.objects.filter(job_id=on_complete.id, kind=EventKind.DUE).count() == 2


# ---- an operator's cancel stays ---------------------------------------------------------------


def test_a_callback_an_operator_cancelled_after_retrying_it_is_not_resumed_by_a_later_retry() -> None:
    members = [step("m0", fail=True)] + [step(f"m{i}") for i in range(1, LEAF_SIZE + 6)]
    workflow = enqueue_group(members, on_success=summary("ok"))
    run_until_settled(in_thread=True)
    m0 = Job.objects.get(workflow_id=workflow.id, payload__key="m0")
    on_success = role(workflow, "on_success")
    # Retried together (the callback waits again), then the operator cancels the callback.
    bulk.retry_matching(JobFilter(workflow=workflow.id), reason="provider is back", actor="ops")
    run_one()  # the bulk operation's runner
    assert status(on_success) == JobStatus.WAITING
    assert cancel(on_success.id, reason="no report this time", actor="ops") == "cancelled"
    assert not WorkflowStep.objects.get(job_id=on_success.id).stopped
    run_until_settled(in_thread=True)  # m0 fails again

    Job.objects.filter(id=m0.id).update(payload={"key": "m0-fixed"})
    retry(m0.id, reason="fixed", actor="ops")
    run_until_settled(in_thread=True)

    assert status(m0) == JobStatus.COMPLETED
    assert status(on_success) == JobStatus.CANCELLED and not ran("ok")
    kinds = list(JobEvent.objects.filter(job_id=on_success.id).order_by("id").values_list("kind", "actor"))
    assert kinds[-1] == (EventKind.CANCELLED, "ops")


def test_the_stopped_mark_is_cleared_by_whatever_takes_a_step_out_of_cancelled() -> None:
    workflow = enqueue_chain(step("a", fail=True), step("b"))
    run_until_settled(in_thread=True)
    a, b = jobs_of(workflow)
    assert WorkflowStep.objects.get(job_id=b.id).stopped
    Job.objects.filter(id=a.id).update(payload={"key": "a-fixed", "fail": False})
    retry(a.id, reason="fixed", actor="ops")  # b waits again: its workflow resumed it
    assert status(b) == JobStatus.WAITING
    assert not WorkflowStep.objects.get(job_id=b.id).stopped
    assert cancel(b.id, reason="b must never run", actor="ops") == "cancelled"
    hold_running(a)
    Job.objects.filter(id=a.id).update(status=JobStatus.FAILED, finished_at=Now())  # fails again
    retry(a.id, reason="once more", actor="ops")
    run_until_settled(in_thread=True)
    assert status(b) == JobStatus.CANCELLED and not ran("b")


# ---- unique keys of the steps a retry resumes --------------------------------------------------


def test_a_retry_that_would_resume_a_step_whose_key_is_taken_names_that_step_and_its_holder() -> None:
    workflow = enqueue_chain(step("a"), step("b", fail=True), Step("test.step", {"key": "c"}, unique_key="k"))
    run_until_settled(in_thread=True)
    _a, b, c = jobs_of(workflow)
    holder = enqueue("test.step", {"key": "x"}, unique_key="k", delay=3600)

    with pytest.raises(KeyHeld) as refused:
        retry(b.id, reason="fixed", actor="ops")

    assert str(refused.value) == (
        f"job {b.id} was not retried: it would resume job {c.id}, which its workflow stopped, "
        f"and job {holder.id} holds that job's unique key 'k' now"
    )
    assert (status(b), status(c)) == (JobStatus.FAILED, JobStatus.CANCELLED)


def test_a_retry_whose_own_key_is_taken_names_the_holder() -> None:
    job = enqueue("test.step", {"key": "x", "fail": True}, unique_key="mine")
    run_until_settled(in_thread=True)
    holder = enqueue("test.step", {"key": "y"}, unique_key="mine", delay=3600)
    with pytest.raises(KeyHeld, match=rf"job {holder.id} \(pending\) holds its unique key 'mine'"):
        retry(job.id, reason="again", actor="ops")


def test_a_key_clash_in_a_bulk_retry_of_a_large_group_is_a_skip_with_its_reason_and_the_operation_ends() -> (
    None
):
    members = [step(f"f{i}", fail=True) for i in range(3)] + [step(f"m{i}") for i in range(LEAF_SIZE + 3)]
    workflow = enqueue_group(members, on_success=summary("ok", unique_key="report"))
    run_until_settled(in_thread=True)
    holder = enqueue("test.summarise", {"key": "other"}, unique_key="report", delay=3600)
    operation = bulk.retry_matching(
        JobFilter(workflow=workflow.id, status="failed"), reason="provider is back", actor="ops"
    )
    runner = run_one()

    assert runner is not None and runner.status == JobStatus.COMPLETED
    operation = BulkOperation.objects.get(id=operation.id)
    assert (operation.state, operation.done, operation.skipped) == ("done", 0, 3)
    skips = BulkOperationJob.objects.filter(operation_id=operation.id)
    assert {s.outcome for s in skips} == {BulkOutcome.KEY_HELD}
    assert all(f"job {holder.id} holds that job's unique key 'report'" in (s.detail or "") for s in skips)
    assert Job.objects.filter(workflow_id=workflow.id, status=JobStatus.FAILED).count() == 3


# ---- retention keeps or prunes a workflow whole --------------------------------------------------


def test_retention_keeps_a_workflow_with_a_failed_job_whole_and_its_retry_resumes_it() -> None:
    workflow = enqueue_group(
        [step("m0"), step("m1", fail=True), step("m2")], on_success=summary("ok"), on_complete=summary("done")
    )
    run_until_settled(in_thread=True)
    age(workflow, 31)  # past completed's and cancelled's retention; failed is kept for ever

    pruner.prune()

    assert Job.objects.filter(workflow_id=workflow.id).count() == 5
    failed = Job.objects.get(workflow_id=workflow.id, status=JobStatus.FAILED)
    Job.objects.filter(id=failed.id).update(payload={"key": "m1-fixed"})
    retry(failed.id, reason="provider fixed", actor="ops")
    run_until_settled(in_thread=True)
    assert Job.objects.get(id=role(workflow, "on_success").id).return_value["summary"] == {"completed": 3}


def test_retention_prunes_a_workflow_whole_once_every_job_of_it_is_past_its_retention() -> None:
    workflow = enqueue_chain(step("a"), step("b", fail=True), step("c"))
    run_until_settled(in_thread=True)
    age(workflow, 31)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jobs_settings, "RETENTION", {**jobs_settings.RETENTION, "failed": 90 * 86400})
        pruner.prune()
        assert Job.objects.filter(workflow_id=workflow.id).count() == 3  # b failed 31 days ago: kept
        age(workflow, 91)
        pruned = pruner.prune()

    assert pruned == {"completed": 1, "failed": 1, "cancelled": 1}
    assert not Job.objects.filter(workflow_id=workflow.id).exists()
    assert not WorkflowStep.objects.filter(workflow_id=workflow.id).exists()
    assert not Barrier.objects.filter(workflow_id=workflow.id).exists()
    assert not Workflow.objects.filter(id=workflow.id).exists()


def test_retention_keeps_a_workflow_while_one_of_its_jobs_is_not_past_its_retention() -> None:
    first = enqueue_chain(step("a"), step("b"))
    run_until_settled(in_thread=True)
    a, _b = jobs_of(first)
    Job.objects.filter(id=a.id).update(finished_at=Now() - dt.timedelta(days=8))  # only a is old
    pruner.prune()
    assert Job.objects.filter(workflow_id=first.id).count() == 2


def test_a_retry_in_a_workflow_an_older_retention_cut_apart_says_it_cannot_resume_it() -> None:
    workflow = enqueue_chain(step("a"), step("b", fail=True), step("c"))
    run_until_settled(in_thread=True)
    a, b, _c = jobs_of(workflow)
    # What a release that pruned workflows job by job left: the completed first step is gone.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_jobs_workflowstep WHERE job_id = %s", [a.id])
        cursor.execute("DELETE FROM django_jobs_jobevent WHERE job_id = %s", [a.id])
        cursor.execute("DELETE FROM django_jobs_job WHERE id = %s", [a.id])

    with pytest.raises(
        StepRefused, match=rf"retention removed 1 of the 3 jobs of its workflow #{workflow.id}"
    ):
        retry(b.id, reason="fixed", actor="ops")
    assert status(b) == JobStatus.FAILED


# ---- cancel_workflow against a claim -----------------------------------------------------------


def test_a_member_claimed_while_cancel_workflow_runs_is_asked_to_stop_and_the_rest_cancelled() -> None:
    workflow = enqueue_group([step("m0"), step("m1")], on_complete=summary("done"))
    claimed, commit = threading.Event(), threading.Event()
    taken: list[Any] = []

    def worker() -> None:  # a worker's claim, its transaction held open until told to commit
        with transaction.atomic(using=jobs_settings.DATABASE):
            taken.extend(claim(Worker(concurrency=1, burst=True)._producer.statement, 1))
            claimed.set()
            commit.wait(10)
        connections.close_all()

    claiming = threading.Thread(target=worker)
    claiming.start()
    assert claimed.wait(10) and len(taken) == 1
    result: list[tuple[int, int]] = []

    def operator() -> None:
        result.append(cancel_workflow(workflow.id, reason="customer left", actor="ops"))
        connections.close_all()

    cancelling = threading.Thread(target=operator)
    cancelling.start()
    _wait_until_blocked(cancelling)  # on the claimed member's row
    commit.set()  # the claim commits: the member is running when the cancel reads it
    claiming.join(10)
    cancelling.join(10)

    member = Job.objects.get(id=taken[0].id)
    assert (member.status, member.cancel_requested_at is not None) == (JobStatus.RUNNING, True)
    others = [job.status for job in jobs_of(workflow) if job.id != member.id]
    assert others == [JobStatus.CANCELLED, JobStatus.CANCELLED]
    assert result == [(2, 1)]


def _wait_until_blocked(thread: threading.Thread) -> None:
    """Until a session of this database waits for a lock (the thread's statement)."""
    for _ in range(200):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        assert thread.is_alive()
        time.sleep(0.05)
    raise AssertionError("cancel_workflow never waited for the claimed member's row")


def test_cancel_workflow_cancels_the_members_not_started_and_asks_the_running_to_stop() -> None:
    workflow = enqueue_group([step("m0"), step("m1")], on_complete=summary("done"))
    m0, m1, done = jobs_of(workflow)
    hold_running(m0)

    assert cancel_workflow(workflow.id, reason="customer left", actor="ops") == (2, 1)
    assert (status(m1), status(done)) == (JobStatus.CANCELLED, JobStatus.CANCELLED)
    assert Job.objects.get(id=m0.id).cancel_requested_at is not None
