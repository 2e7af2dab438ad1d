"""Workflows on the database: each API call, each failure policy, the operator's actions on a
workflow's jobs, and bad input refused with nothing written."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test import TestCase, TransactionTestCase

from django_jobs import (
    Chain,
    Group,
    InvalidPayload,
    InvalidWorkflow,
    Step,
    UnknownJobType,
    cancel,
    cancel_workflow,
    enqueue,
    enqueue_chain,
    enqueue_group,
    enqueue_workflow,
    retry,
    transitions,
)
from django_jobs.console.actions import resolve
from django_jobs.errors import ErrorCode
from django_jobs.maintenance import reaper
from django_jobs.models import Barrier, Job, JobEvent, Workflow, WorkflowStep
from django_jobs.observe.diagnosis import explain
from django_jobs.observe.reasons import Reason
from django_jobs.signals import job_enqueued
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_one, run_until_settled
from django_jobs.workflow_plan import LEAF_SIZE, MAX_JOBS
from django_jobs.workflows import jobs_of
from testproject.testjobs.jobs import SimulatedCrash
from testproject.testjobs.models import BusinessRow


def step(key: str, **payload: Any) -> Step:
    return Step("test.step", {"key": key, **payload})


def callback(key: str) -> Step:
    return Step("test.summarise", {"key": key})


def statuses(workflow: Workflow) -> list[str]:
    return [job.status for job in jobs_of(workflow)]


def ran(*keys: str) -> bool:
    return set(BusinessRow.objects.filter(key__in=keys).values_list("key", flat=True)) == set(keys)


def make_succeed(job: Job) -> None:
    """The operator fixed the cause: the step no longer fails (and records under a new key)."""
    Job.objects.filter(id=job.id).update(payload={"key": f"{job.payload['key']}-fixed"})


class Chains(TestCase):
    def test_a_chain_runs_step_by_step_and_each_step_reads_the_result_before_it(self) -> None:
        workflow = enqueue_chain(
            step("charge", n=1),
            step("reserve", n=2, read_parent=True),
            step("email", read_parent=True),
            name="order 7",
        )
        assert (workflow.kind, workflow.name, workflow.size) == ("chain", "order 7", 3)
        assert statuses(workflow) == ["pending", "waiting", "waiting"]
        first = run_one()
        assert first is not None and first.payload["key"] == "charge"
        assert statuses(workflow) == ["completed", "pending", "waiting"]
        run_until_settled(in_thread=True)
        _charge, reserve, email = jobs_of(workflow)
        assert statuses(workflow) == ["completed"] * 3
        assert reserve.return_value == {"n": 2, "parent": {"n": 1, "parent": None}}
        assert email.return_value["parent"]["n"] == 2
        due = JobEvent.objects.get(job=reserve, kind=EventKind.DUE)
        assert (due.from_status, due.to_status, due.actor) == ("waiting", "pending", "workflow")

    def test_a_waiting_step_is_never_claimed(self) -> None:
        workflow = enqueue_chain(step("a", sleep=0), step("b"))
        waiting = jobs_of(workflow)[1]
        assert not Job.objects.claimable().filter(id=waiting.id).exists()
        assert Job.objects.claimable().filter(workflow_id=workflow.id).count() == 1

    def test_a_failed_step_stops_its_chain_and_a_retry_of_it_resumes_the_chain(self) -> None:
        workflow = enqueue_chain(step("a"), step("b", fail=True), step("c"), step("d"))
        run_until_settled(in_thread=True)
        _a, b, c, d = jobs_of(workflow)
        assert statuses(workflow) == ["completed", "failed", "cancelled", "cancelled"]
        assert (c.last_error_code, d.last_error_code) == (
            ErrorCode.WORKFLOW_STOPPED,
            ErrorCode.WORKFLOW_STOPPED,
        )
        assert c.last_error == f"not run: job {b.id}, which it waited for, ended failed"
        assert JobEvent.objects.get(job=d, kind=EventKind.STOPPED).actor == "workflow"
        assert not BusinessRow.objects.filter(key__in=["c", "d"]).exists()

        make_succeed(b)
        assert retry(b.id, reason="fixed the account", actor="ops") == "failed"
        assert statuses(workflow) == ["completed", "pending", "waiting", "waiting"]
        assert (
            JobEvent.objects.get(job=c, kind=EventKind.RESUMED).reason
            == f"job {b.id}, which it waits for, was retried"
        )
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["completed"] * 4
        assert ran("a", "b", "b-fixed", "c", "d") and BusinessRow.objects.filter(key="a").count() == 1

    def test_a_chain_that_continues_runs_the_next_step_after_a_failure(self) -> None:
        workflow = enqueue_chain(step("a", fail=True), step("b"), on_failure="continue")
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["failed", "completed"]

    def test_a_step_after_a_parent_that_did_not_complete_reads_none_as_its_result(self) -> None:
        # parent_result() is what the parent returned, whatever it ended as: None when it failed
        # (or was skipped, or returned nothing); ctx.upstream() tells those apart.
        workflow = enqueue_chain(step("a", fail=True), step("b", read_parent=True), on_failure="continue")
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["failed", "completed"]
        assert jobs_of(workflow)[1].return_value == {"n": None, "parent": None}

    def test_a_skipped_step_counts_as_done(self) -> None:
        workflow = enqueue_chain(Step("test.skip", {}), step("after"))
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["skipped", "completed"]

    def test_an_operator_cancelling_a_waiting_step_stops_what_follows_and_is_never_undone_by_a_retry(
        self,
    ) -> None:
        workflow = enqueue_chain(step("a", fail=True), step("b"), step("c"), on_failure="continue")
        a, b, _c = jobs_of(workflow)
        assert cancel(b.id, reason="not wanted", actor="ops") == "cancelled"
        event = JobEvent.objects.get(job=b, kind=EventKind.CANCELLED)
        assert (event.from_status, event.actor) == ("waiting", "ops")
        run_until_settled(in_thread=True)
        # c continues after b, however b ended: it runs.
        assert statuses(workflow) == ["failed", "cancelled", "completed"]
        make_succeed(a)
        retry(a.id, reason="again", actor="ops")
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["completed", "cancelled", "completed"]
        assert not JobEvent.objects.filter(job=b, kind=EventKind.RESUMED).exists()

    def test_a_delay_counts_from_when_the_step_becomes_due(self) -> None:
        workflow = enqueue_chain(step("a"), Step("test.step", {"key": "b"}, delay=3600))
        run_one()
        b = jobs_of(workflow)[1]
        assert b.status == JobStatus.PENDING and not b.ready
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s - now()", [b.available_at])
            assert cursor.fetchone()[0] >= dt.timedelta(seconds=3599)

    def test_a_step_reaped_after_its_worker_died_counts_when_the_reaper_ends_it(self) -> None:
        crashing = {"order": 1, "crash_plan": ["before_effect"], "crash_by": "exception"}
        workflow = enqueue_chain(Step("test.invoice", crashing, max_attempts=1), step("b"))
        first = jobs_of(workflow)[0]
        with pytest.raises(SimulatedCrash):
            run_one()
        Job.objects.filter(id=first.id).update(lease_expires_at=Now() - dt.timedelta(hours=1))
        assert reaper.recover() == {"failed": 1}
        assert statuses(workflow) == ["failed", "cancelled"]

    def test_the_outcome_of_a_zombie_execution_counts_nothing(self) -> None:
        workflow = enqueue_chain(step("a"), step("b"))
        a, b = jobs_of(workflow)
        owner, zombie = uuid.uuid4(), uuid.uuid4()
        Job.objects.filter(id=a.id).update(
            status=JobStatus.RUNNING, execution_id=owner, heartbeat_at=Now(),
            lease_expires_at=Now() + dt.timedelta(minutes=5),
        )  # fmt: skip
        assert transitions.write_outcomes([transitions.Outcome(a.id, zombie, JobStatus.COMPLETED)]) == set()
        assert statuses(workflow) == ["running", "waiting"]
        assert transitions.write_outcomes([transitions.Outcome(a.id, owner, JobStatus.COMPLETED)]) == {a.id}
        assert statuses(workflow) == ["completed", "pending"]
        assert JobEvent.objects.filter(job=b, kind=EventKind.DUE).count() == 1

    def test_a_parked_step_holds_the_chain_until_an_operator_resolves_it(self) -> None:
        workflow = enqueue_chain(step("a"), step("b"))
        a, b = jobs_of(workflow)
        Job.objects.filter(id=a.id).update(status=JobStatus.NEEDS_REVIEW)
        with pytest.raises(TimeoutError, match=f"jobs {a.id} need review"):
            run_until_settled(in_thread=True)
        explained = explain(b.id)
        assert explained.reason == Reason.WAITING
        assert f"job {a.id} (test.step, parked for review" in explained.sentence
        resolve(a.id, to="completed", reason="checked at the provider", actor="ops")
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["completed", "completed"]


class Groups(TestCase):
    def test_callbacks_fire_once_with_a_summary_and_the_results(self) -> None:
        workflow = enqueue_group(
            [step(f"m{i}", n=i) for i in range(5)],
            on_success=callback("ok"),
            on_failure=callback("bad"),
            on_complete=callback("done"),
        )
        run_until_settled(in_thread=True)
        jobs = {job.step.role: job for job in jobs_of(workflow) if job.step.role != "step"}
        assert jobs["on_success"].return_value == {"summary": {"completed": 5}, "read": 5}
        assert jobs["on_complete"].status == JobStatus.COMPLETED
        assert (jobs["on_failure"].status, jobs["on_failure"].last_error) == (
            JobStatus.CANCELLED,
            "not run: every job it waited for succeeded",
        )

    def test_a_failed_member_fires_on_failure_and_a_retry_brings_on_success_back(self) -> None:
        workflow = enqueue_group(
            [step("m0"), step("m1", fail=True), step("m2")],
            on_success=callback("ok"),
            on_failure=callback("bad"),
            on_complete=callback("done"),
        )
        run_until_settled(in_thread=True)
        by_role = {job.step.role: job for job in jobs_of(workflow)}
        assert by_role["on_failure"].return_value["summary"] == {"completed": 2, "failed": 1}
        assert by_role["on_complete"].status == JobStatus.COMPLETED
        assert (
            by_role["on_success"].last_error
            == "not run: 1 of the 3 jobs it waited for failed or were cancelled"
        )
        failed = Job.objects.get(workflow_id=workflow.id, status=JobStatus.FAILED)
        make_succeed(failed)
        retry(failed.id, reason="fixed", actor="ops")
        assert Job.objects.get(id=by_role["on_success"].id).status == JobStatus.WAITING
        run_until_settled(in_thread=True)
        # on_success ran now; on_failure and on_complete became due once, before.
        assert statuses(workflow) == ["completed"] * 6
        assert ran("ok", "bad", "done")
        for role in ("on_success", "on_failure", "on_complete"):
            assert JobEvent.objects.filter(job=by_role[role], kind=EventKind.DUE).count() == 1
        assert Job.objects.get(id=by_role["on_complete"].id).attempts == 1

    def test_a_group_larger_than_a_leaf_counts_through_its_tree(self) -> None:
        n = LEAF_SIZE * 2 + 5
        workflow = enqueue_group([step(f"m{i}") for i in range(n)], on_complete=callback("done"))
        assert Barrier.objects.filter(workflow=workflow).count() == 1 + 3
        run_until_settled(in_thread=True)
        done = Job.objects.get(workflow_id=workflow.id, step__role="on_complete")
        assert done.return_value == {"summary": {"completed": n}, "read": n}

    def test_a_member_cancelled_counts_as_a_failure(self) -> None:
        workflow = enqueue_group(
            [step("m0"), step("m1")], on_success=callback("ok"), on_failure=callback("bad")
        )
        cancel(jobs_of(workflow)[1].id, reason="duplicate", actor="ops")
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["completed", "cancelled", "cancelled", "completed"]

    def test_the_waiting_callback_explains_what_it_waits_for(self) -> None:
        workflow = enqueue_group([step(f"m{i}") for i in range(3)], on_complete=callback("done"))
        run_one()
        done = Job.objects.get(workflow_id=workflow.id, step__role="on_complete")
        explained = explain(done.id)
        assert explained.reason == Reason.WAITING
        assert explained.sentence.startswith(
            f"It waits for 2 of the 3 jobs before it in workflow {workflow.id}"
        )
        assert ("waits for", "2 of 3 job(s) not ended, 0 failed or cancelled") in explained.evidence

    def test_a_chain_of_groups_and_groups_of_chains(self) -> None:
        workflow = enqueue_workflow(
            Chain(
                step("start"),
                Group([Chain(step("a1"), step("a2")), step("b")]),
                step("end", read_parent=False),
            )
        )
        run_until_settled(in_thread=True)
        assert statuses(workflow) == ["completed"] * 5
        end = jobs_of(workflow)[-1]
        ended_at = {job.payload["key"]: job.completed_at for job in jobs_of(workflow)}
        assert ended_at["end"] >= max(ended_at["a2"], ended_at["b"])
        assert end.step.stage == 3


class WorkflowCancel(TestCase):
    def test_cancelling_a_workflow_cancels_what_has_not_started_and_asks_the_running_to_stop(self) -> None:
        workflow = enqueue_group([step("m0"), step("m1")], on_complete=callback("done"))
        m0, _m1, done = jobs_of(workflow)
        Job.objects.filter(id=m0.id).update(
            status=JobStatus.RUNNING, execution_id="00000000-0000-0000-0000-000000000001",
            heartbeat_at=Now(), lease_expires_at=Now() + dt.timedelta(minutes=5),
        )  # fmt: skip
        assert cancel_workflow(workflow.id, reason="customer left", actor="ops") == (2, 1)
        assert statuses(workflow) == ["running", "cancelled", "cancelled"]
        assert Job.objects.get(id=m0.id).cancel_requested_at is not None
        assert JobEvent.objects.get(job=done, kind=EventKind.CANCELLED).from_status == "waiting"

    def test_a_workflow_nobody_made_is_refused(self) -> None:
        with pytest.raises(LookupError, match="no workflow has id 999999"):
            cancel_workflow(999999, reason="x", actor="ops")
        with pytest.raises(ValueError, match="reason"):
            cancel_workflow(1, reason="", actor="ops")


class Keys(TestCase):
    def test_a_waiting_step_holds_its_unique_key(self) -> None:
        workflow = enqueue_chain(step("a"), Step("test.step", {"key": "b"}, unique_key="invoice:9"))
        waiting = jobs_of(workflow)[1]
        assert enqueue("test.step", {"key": "other"}, unique_key="invoice:9").id == waiting.id

    def test_a_step_whose_key_another_job_holds_refuses_the_workflow_and_writes_nothing(self) -> None:
        holder = enqueue("test.step", {"key": "x"}, unique_key="invoice:9")
        before = (
            Job.objects.count(),
            Workflow.objects.count(),
            Barrier.objects.count(),
            WorkflowStep.objects.count(),
        )
        with pytest.raises(
            InvalidWorkflow, match=rf"workflow\[1\]: unique key 'invoice:9' .* held by job {holder.id}"
        ):
            enqueue_chain(step("a"), Step("test.step", {"key": "b"}, unique_key="invoice:9"))
        assert (
            Job.objects.count(),
            Workflow.objects.count(),
            Barrier.objects.count(),
            WorkflowStep.objects.count(),
        ) == before


class BadInput(TestCase):
    def nothing_written(self) -> None:
        assert (Job.objects.count(), Workflow.objects.count(), Barrier.objects.count()) == (0, 0, 0)

    def test_an_unknown_type_in_a_member_names_the_member(self) -> None:
        with pytest.raises(UnknownJobType, match=r"workflow\[1\]\[0\]: unknown job type 'test.nope'"):
            enqueue_group([step("a"), Chain(Step("test.nope", {}))])
        self.nothing_written()

    def test_a_callback_of_an_unregistered_type(self) -> None:
        with pytest.raises(UnknownJobType, match=r"on_complete: unknown job type 'shop.gone'"):
            enqueue_group([step("a")], on_complete=Step("shop.gone", {}))
        self.nothing_written()

    def test_a_bad_payload_or_option_names_its_step(self) -> None:
        with pytest.raises(InvalidPayload, match=r"workflow\[1\]: payload must be a dict"):
            enqueue_chain(step("a"), Step("test.step", ["not", "a", "dict"]))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"workflow\[0\]: invalid priority 1000"):
            enqueue_chain(Step("test.step", {"key": "a"}, priority=1000))
        self.nothing_written()

    def test_a_group_of_none_and_over_the_limit(self) -> None:
        with pytest.raises(InvalidWorkflow, match="group of no jobs"):
            enqueue_group([], on_complete=callback("done"))
        with pytest.raises(InvalidWorkflow, match="at most 100,000 jobs"):
            enqueue_group(Step("test.noop", {}) for _ in range(MAX_JOBS + 1))
        self.nothing_written()

    def test_a_cycle(self) -> None:
        looped = Chain(step("a"))
        object.__setattr__(looped, "parts", (looped,))
        with pytest.raises(InvalidWorkflow, match="appears twice"):
            enqueue_workflow(looped)
        self.nothing_written()

    def test_a_bad_name(self) -> None:
        with pytest.raises(InvalidWorkflow, match="name"):
            enqueue_chain(step("a"), name="x\x00")
        self.nothing_written()


class Retention(TestCase):
    def test_the_members_of_a_workflow_that_still_runs_are_kept(self) -> None:
        workflow = enqueue_chain(step("a"), step("b"))
        run_one()
        old = Now() - dt.timedelta(days=400)
        Job.objects.filter(workflow_id=workflow.id, status="completed").update(finished_at=old)
        reaper.run_once()
        assert statuses(workflow) == ["completed", "pending"]


class InTheCallersTransaction(TransactionTestCase):
    def test_each_job_of_a_workflow_is_announced_once_committed(self) -> None:
        announced: list[tuple[int, str]] = []

        def receiver(sender: object, job: Job, **kwargs: object) -> None:
            announced.append((job.id, job.status))

        job_enqueued.connect(receiver)
        try:
            with transaction.atomic():
                workflow = enqueue_chain(step("a"), step("b"))
                assert announced == []  # not before the commit
            with pytest.raises(RuntimeError), transaction.atomic():
                enqueue_chain(step("c"), step("d"))
                raise RuntimeError("rolled back")
        finally:
            job_enqueued.disconnect(receiver)
        a, b = jobs_of(workflow)
        assert announced == [(a.id, "pending"), (b.id, "waiting")]

    def test_a_rolled_back_transaction_leaves_no_workflow(self) -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_chain(step("a"), step("b"))
            raise RuntimeError("the view failed")
        assert (Job.objects.count(), Workflow.objects.count()) == (0, 0)

    def test_a_large_group_counted_at_commit_fires_its_callback_once(self) -> None:
        n = LEAF_SIZE * 5 + 3
        workflow = enqueue_group([step(f"m{i}") for i in range(n)], on_complete=callback("done"))
        run_until_settled(concurrency=4)
        done = Job.objects.get(workflow_id=workflow.id, step__role="on_complete")
        assert (done.status, done.return_value["read"]) == (JobStatus.COMPLETED, n)
        assert Barrier.objects.get(workflow=workflow, parent=None).remaining == 0
        assert set(Barrier.objects.filter(workflow=workflow).values_list("remaining", flat=True)) == {0}
