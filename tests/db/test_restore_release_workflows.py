"""A restore hold's release and workflows: a step of an external type still waiting for the jobs
before it is settled too, and keeps its place in its workflow.

In the lost timeline the jobs before it may have ended and the step run: its provider may have
the effect. So it is marked as a pending job is, but it keeps waiting; once what it waits for has
ended here, it asks its type's reconcile first, or is parked for review if its type cannot ask.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models.functions import Now

from django_jobs import Step, enqueue_chain
from django_jobs.console import restore_holds
from django_jobs.models import Job, JobEvent, Workflow
from django_jobs.states import JobStatus
from django_jobs.workflows import jobs_of
from tests.db.inprocess import run_worker

pytestmark = pytest.mark.django_db(transaction=True)

CHARGE, NOTICE = "test.provider_charge", "test.provider_notice"  # reconcile / no reconcile


def _restored(record: Path, *steps: Step, lines: str) -> tuple[Workflow, list[Job]]:
    """A workflow enqueued before the backup, its provider's record as the lost timeline left it,
    and a hold declared on the restored database."""
    record.write_text(lines)
    workflow = enqueue_chain(*steps)
    Job.objects.filter(workflow_id=workflow.id).update(created_at=Now() - timedelta(minutes=5))
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    return workflow, list(jobs_of(workflow))


def _step(job_type: str, record: Path, operation: str) -> Step:
    return Step(job_type, {"record": str(record), "operation": operation})


def _row(job: Job) -> tuple[str, str | None]:
    found = Job.objects.get(id=job.id)
    return found.status, found.last_error_code


def test_a_waiting_external_step_is_held_settled_and_parked_once_due_never_run_blind(tmp_path: Path) -> None:
    record = tmp_path / "provider"
    _, (charge, notice) = _restored(
        record, _step(CHARGE, record, "c1"), _step(NOTICE, record, "n1"),
        lines="test.provider_charge:c1\ntest.provider_notice:n1\n",
    )  # fmt: skip
    assert restore_holds.status().waiting[(NOTICE, JobStatus.WAITING)] == 1  # the hold keeps it

    released = restore_holds.release(actor="lead", reason="providers checked, reconcile deployed")

    assert (released.settled.to_reconcile, released.settled.waiting) == (1, 1)
    # It keeps waiting for the charge, marked: the release does not take it out of its workflow.
    assert _row(notice) == (JobStatus.WAITING, "RESTORED")
    event = JobEvent.objects.get(job_id=notice.id)
    assert (event.kind, event.from_status, event.to_status, event.actor) == (
        "restore_released", "waiting", "waiting", "lead",
    )  # fmt: skip
    run_worker()
    # The charge asked the provider (done: not run again); the notice, due, cannot ask: parked.
    assert _row(charge) == (JobStatus.COMPLETED, "RESTORED")
    assert _row(notice) == (JobStatus.NEEDS_REVIEW, "RESTORED")
    parked = JobEvent.objects.filter(job_id=notice.id).latest("id")
    assert (parked.kind, parked.from_status, parked.to_status, parked.actor) == (
        "needs_review", "waiting", "needs_review", "workflow",
    )  # fmt: skip
    assert "restored from backup" in (parked.error or "")
    assert record.read_text().splitlines() == ["test.provider_charge:c1", "test.provider_notice:n1"]


@pytest.mark.parametrize(("known", "calls"), [(True, 1), (False, 1)], ids=["done_there", "not_done_there"])
def test_a_waiting_step_that_can_reconcile_asks_its_provider_once_due(
    tmp_path: Path, known: bool, calls: int
) -> None:
    record = tmp_path / "provider"
    lines = "test.provider_charge:c1\n" + ("test.provider_charge:c2\n" if known else "")
    _, (first, second) = _restored(
        record, _step(CHARGE, record, "c1"), _step(CHARGE, record, "c2"), lines=lines
    )
    restore_holds.release(actor="lead", reason="providers checked")
    assert _row(second) == (JobStatus.WAITING, "RESTORED")
    run_worker()
    assert Job.objects.get(id=first.id).status == JobStatus.COMPLETED
    assert Job.objects.get(id=second.id).status == JobStatus.COMPLETED
    reconciled = JobEvent.objects.filter(job_id=second.id, kind="reconciled").exists()
    assert reconciled is known  # found done: completed without running
    assert record.read_text().splitlines().count("test.provider_charge:c2") == calls


def test_a_waiting_step_answered_done_ends_and_counts_in_its_workflow(tmp_path: Path) -> None:
    record = tmp_path / "provider"
    workflow, (_, notice, after) = _restored(
        record, _step(CHARGE, record, "c1"), _step(NOTICE, record, "n1"), Step("test.noop", {}),
        lines="test.provider_charge:c1\ntest.provider_notice:n1\n",
    )  # fmt: skip
    released = restore_holds.release(actor="lead", reason="the provider has n1", done=[notice.id])
    assert (released.settled.done, released.settled.waiting) == (1, 0)
    assert Job.objects.get(id=notice.id).status == JobStatus.COMPLETED
    # Its end is counted by its workflow: the step after it is due.
    assert Job.objects.get(id=after.id).status == JobStatus.PENDING
    kinds = list(JobEvent.objects.filter(job_id=notice.id).order_by("id").values_list("kind", "from_status"))
    assert kinds == [("needs_review", "waiting"), ("resolved", "needs_review")]
    run_worker()
    assert {j.status for j in jobs_of(workflow)} == {JobStatus.COMPLETED}
    assert record.read_text().splitlines().count("test.provider_notice:n1") == 1


def test_a_waiting_step_answered_not_done_waits_unmarked_and_runs_once_due(tmp_path: Path) -> None:
    record = tmp_path / "provider"
    workflow, (_, notice) = _restored(
        record, _step(CHARGE, record, "c1"), _step(NOTICE, record, "n1"), lines="test.provider_charge:c1\n"
    )
    restore_holds.release(actor="lead", reason="the provider has no n1", not_done=[notice.id])
    assert _row(notice) == (JobStatus.WAITING, None)
    run_worker()
    assert {j.status for j in jobs_of(workflow)} == {JobStatus.COMPLETED}
    assert record.read_text().splitlines() == ["test.provider_charge:c1", "test.provider_notice:n1"]
