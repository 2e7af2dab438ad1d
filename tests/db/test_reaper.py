"""Reaper decisions on rows built in any state, and what a zombie execution can still do."""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from django_jobs import transitions
from django_jobs.maintenance import pruner, reaper
from django_jobs.models import Job, JobEvent
from django_jobs.runtime.context import JobContext, LeaseLost
from django_jobs.runtime.lease import Lease
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Outcome
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_expired_job_with_attempts_left_goes_back_to_pending(db_now: Callable[[], Any]) -> None:
    job = JobFactory(running_stale=True, type="test.flaky", attempts=2, max_attempts=5)
    lost_execution, lost_worker = job.execution_id, job.worker_id
    assert reaper.run_once().recovered == {"pending": 1}
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 2, "LEASE_LOST")
    assert job.available_at > db_now() - dt.timedelta(seconds=1)
    assert job.worker_id is None and job.execution_id is None and job.lease_expires_at is None
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.from_status, event.to_status, event.actor) == (
        EventKind.RECOVERED, "running", "pending", "reaper",
    )  # fmt: skip
    assert (event.execution_id, event.worker_id, event.attempt) == (lost_execution, lost_worker, 2)
    assert str(lost_execution) in (event.error or "")


def test_expired_last_attempt_fails() -> None:
    job = JobFactory(running_stale=True, attempts=5, max_attempts=5)
    assert reaper.recover() == {"failed": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.failed_at is not None and job.finished_at is not None
    assert JobEvent.objects.get(job=job).to_status == "failed"


def test_expired_job_of_an_unsafe_type_needs_review() -> None:
    job = JobFactory(running_stale=True, type="test.unsafe", attempts=1, max_attempts=5)
    assert reaper.recover() == {"needs_review": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.NEEDS_REVIEW
    assert "blind retry is unsafe" in (job.last_error or "")


def test_live_leases_are_left_alone() -> None:
    live = JobFactory(running=True)
    pending = JobFactory()
    assert reaper.recover() == {}
    assert Job.objects.get(id=live.id).status == JobStatus.RUNNING
    assert Job.objects.get(id=pending.id).status == JobStatus.PENDING


def test_zombie_execution_can_change_nothing_after_recovery() -> None:
    job = JobFactory(running_stale=True, type="test.flaky")
    zombie = job.execution_id
    reaper.recover()
    job.refresh_from_db()
    before = (job.status, job.available_at, job.attempts, job.last_error)

    assert transitions.write_outcomes([Outcome(job.id, zombie, JobStatus.COMPLETED)]) == set()
    assert transitions.heartbeat([(job.id, zombie, 60.0)]) == {}
    assert not transitions.set_progress(job.id, zombie, '{"done": 1}')
    assert not transitions.set_checkpoint(job.id, zombie, '{"next": 9}')
    ctx = JobContext(
        job_id=job.id, type=job.type, queue=job.queue, attempt=1, max_attempts=5,
        execution_id=zombie, lease=Lease(job.id, zombie, 60.0),
    )  # fmt: skip
    with pytest.raises(LeaseLost):
        ctx.save_checkpoint({"next": 9})
    with pytest.raises(LeaseLost):
        ctx.progress(1, 1)

    job.refresh_from_db()
    assert (job.status, job.available_at, job.attempts, job.last_error) == before
    assert job.checkpoint is None and job.progress is None
    assert JobEvent.objects.filter(job=job).count() == 1  # the recovery, nothing from the zombie


def test_reapers_in_parallel_recover_each_job_once() -> None:
    jobs = JobFactory.create_batch(300, running_stale=True)
    barrier = threading.Barrier(3)
    results: list[dict[str, int]] = []

    def reap() -> None:
        try:
            barrier.wait()
            results.append(reaper.recover())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=reap) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.get("pending", 0) for r in results) == 300
    assert JobEvent.objects.filter(kind=EventKind.RECOVERED).count() == 300
    assert Job.objects.filter(id__in=[j.id for j in jobs], status=JobStatus.PENDING).count() == 300


def test_retention_prunes_old_finished_jobs_with_their_events() -> None:
    old = timezone.now() - dt.timedelta(days=30)
    old_completed = JobFactory(completed=True, finished_at=old)
    JobEvent.objects.create(job=old_completed, kind=EventKind.RETRY_SCHEDULED)
    old_failed = JobFactory(failed=True, finished_at=old)
    recent = JobFactory(completed=True)
    pending = JobFactory()
    with override_settings(DJANGO_JOBS={"RETENTION": {"completed": 86400, "failed": None}}):
        assert reaper.prune() == {"completed": 1}
    remaining = set(Job.objects.values_list("id", flat=True))
    assert remaining == {old_failed.id, recent.id, pending.id}  # failed jobs are kept forever
    assert not JobEvent.objects.exists()


def test_retention_that_runs_out_of_time_says_so_and_the_loop_goes_on_at_once() -> None:
    """A pass prunes until caught up or out of its time budget; out of time with jobs still
    due, the reaper loop does not wait an interval: the table must not outgrow retention."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, finished_at, completed_at) SELECT 'default', 'test.noop', 1, '{}',"
            " 'completed', 0, 1, 5, now() - interval '30 days', now() - interval '30 days'"
            " FROM generate_series(1, %s)",
            [reaper.BATCH * 2 + 7],
        )
    with override_settings(DJANGO_JOBS={"RETENTION": {"completed": 86400}, "REAPER_INTERVAL": 600}):
        assert pruner.run_once(budget=0.0) == ({"completed": reaper.BATCH}, True)
        result = reaper.run_once()  # half of 600 s is plenty for the rest
        assert result.pruned == {"completed": reaper.BATCH + 7} and not result.retention_behind
        assert not Job.objects.exists()

        stop = PacedStop()
        loop = reaper.ReaperLoop(stop, interval=600)
        loop._behind = True  # as after a pass that ran out of time
        JobFactory(completed=True, finished_at=timezone.now() - dt.timedelta(days=30))
        loop.run_forever(stop)  # on this thread: it stops at the first wait that is not immediate
        assert stop.asked[0] == 0.0, "the loop waited an interval although retention was behind"
        assert loop.passes == 1
        assert not Job.objects.exists() and not loop._behind  # caught up: back to the interval
        assert 0.8 * 600 <= stop.asked[1] <= 1.2 * 600


def test_each_retention_batch_starts_where_the_one_before_stopped() -> None:
    """The finished-jobs index holds the entries of the jobs pruned since vacuum last ran, at its
    head: a batch that started from the head would step over every one of them. Run in one
    transaction, the pruned rows stay invisible, not vacuumed, and the index's counters say how
    many entries the pass read."""
    from django.db import connection, transaction

    n = reaper.BATCH * 4 + 3
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, finished_at, completed_at) SELECT 'default', 'test.noop', 1, '{}',"
            " 'completed', 0, 1, 5, now() - interval '30 days' + make_interval(secs => g),"
            " now() - interval '30 days' FROM generate_series(1, %s) AS g",
            [n],
        )
        cursor.execute("ANALYZE django_jobs_job")
    entries_read = "SELECT pg_stat_get_xact_tuples_returned('django_jobs_finished'::regclass)"
    with override_settings(DJANGO_JOBS={"RETENTION": {"completed": 86400}}), transaction.atomic():
        assert pruner.run_once() == ({"completed": n}, False)
        with connection.cursor() as cursor:
            cursor.execute(entries_read)
            (read,) = cursor.fetchone()
    # Each batch reads its own rows, the last entry of the batch before (its `since`) and an
    # entry or two the planner probes; from the head, the five batches would read 500 + 1,000 +
    # 1,500 + 2,000 + 2,003 entries.
    assert n <= read <= n + 3 * 5, f"a pass of {n} jobs read {read} index entries"
    assert not Job.objects.exists()


def test_a_retention_batch_boundary_inside_one_finishing_time_loses_nothing() -> None:
    """An outcome batch finishes its jobs at one ``now()``: a retention batch may stop among
    them, and the next must take the rest, not start after that time."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, finished_at, completed_at) SELECT 'default', 'test.noop', 1, '{}',"
            " 'completed', 0, 1, 5, now() - make_interval(days => 30 + g %% 2), now()"
            " FROM generate_series(1, %s) AS g",
            [reaper.BATCH * 3],
        )
    first = transitions.prune("completed", 86400, reaper.BATCH)
    assert first.deleted == reaper.BATCH
    second = transitions.prune("completed", 86400, reaper.BATCH, first.until)
    third = transitions.prune("completed", 86400, reaper.BATCH, second.until)
    assert (second.deleted, third.deleted) == (reaper.BATCH, reaper.BATCH)
    assert first.until < third.until and not Job.objects.exists()
    assert transitions.prune("completed", 86400, reaper.BATCH, third.until) == (0, None)


class PacedStop(threading.Event):
    """A stop event that records the waits a loop asks of it and answers at once: an immediate
    wait lets the loop go on, any longer one stops it. The loop's pacing, without waiting it out."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        return self.is_set() or timeout != 0.0


def test_reapjobs_command_reports_what_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    JobFactory(running_stale=True)
    call_command("reapjobs")
    assert "recovered 1 → pending; pruned nothing" in capsys.readouterr().out


def test_reapjobs_json_reports_each_recovery_for_the_audit(capsys: pytest.CaptureFixture[str]) -> None:
    retried = JobFactory(running_stale=True, type="test.flaky", attempts=1)
    parked = JobFactory(running_stale=True, type="test.unsafe", attempts=1)
    exhausted = JobFactory(running_stale=True, attempts=5, max_attempts=5)
    live = JobFactory(running=True)
    call_command("reapjobs", "--json")
    report = json.loads(capsys.readouterr().out)
    by_id = {job["id"]: job for job in report["recovered"]}
    assert set(by_id) == {retried.id, parked.id, exhausted.id}  # never the live one
    assert live.id not in by_id
    retried_report = by_id[retried.id]
    assert retried_report == {
        "id": retried.id, "type": "test.flaky", "lost_execution": str(retried.execution_id),
        "worker": "host:1:abc", "status": "pending", "attempts": 1, "max_attempts": 5,
        "error_code": "LEASE_LOST", "why": retried_report["why"], "retry_in": retried_report["retry_in"],
        "marked_call": None,
    }  # fmt: skip
    assert f"execution {retried.execution_id} on worker host:1:abc stopped renewing" in retried_report["why"]
    assert 0 < retried_report["retry_in"] < 60
    assert (by_id[parked.id]["status"], by_id[parked.id]["retry_in"]) == ("needs_review", None)
    assert "blind retry is unsafe" in by_id[parked.id]["why"]
    assert "attempts exhausted" in by_id[exhausted.id]["why"] and by_id[exhausted.id]["status"] == "failed"
    assert report["recovered_by_status"] == {"failed": 1, "needs_review": 1, "pending": 1}
    assert report["pruned"] == {}


def test_reapjobs_json_with_nothing_to_do_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("reapjobs", "--json")
    assert json.loads(capsys.readouterr().out) == {"recovered": [], "recovered_by_status": {}, "pruned": {}}


def test_a_reaper_loop_tells_what_each_pass_did() -> None:
    job = JobFactory(running_stale=True)
    passes: list[reaper.ReapResult] = []
    loop = reaper.ReaperLoop(threading.Event(), on_pass=passes.append)
    loop.run_now()
    loop.run_now()
    assert [[r.id for r in p.jobs] for p in passes] == [[job.id], []]


def test_a_failed_reaper_pass_is_logged_not_raised_and_the_loop_waits_an_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    JobFactory(running_stale=True)

    def refuse(result: reaper.ReapResult) -> None:
        raise RuntimeError("the report could not be written")

    loop = reaper.ReaperLoop(threading.Event(), interval=600, on_pass=refuse)
    assert loop.run_now() is False
    assert "reaper pass failed, retrying next interval" in caplog.text
    assert "the report could not be written" in caplog.text
    assert 0.8 * 600 <= loop.next_wait() <= 1.2 * 600


def test_cancel_pending_job_at_once() -> None:
    job = JobFactory()
    assert transitions.cancel(job.id, actor="alice", reason="customer asked") == "cancelled"
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and job.finished_at is not None
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.actor, event.reason) == (EventKind.CANCELLED, "alice", "customer asked")


def test_cancel_running_job_is_a_request() -> None:
    job = JobFactory(running=True)
    assert transitions.cancel(job.id, actor="alice") == "requested"
    assert transitions.cancel(job.id, actor="alice") == "not_cancellable"  # already requested
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested_at is not None
    assert transitions.heartbeat([(job.id, job.execution_id, 60.0)]) == {job.id: True}


def test_finished_jobs_cannot_be_cancelled() -> None:
    job = JobFactory(completed=True)
    assert transitions.cancel(job.id) == "not_cancellable"
    assert not JobEvent.objects.exists()


def test_heartbeat_extends_only_owned_leases(db_now: Callable[[], Any]) -> None:
    job = JobFactory(running=True)
    assert transitions.heartbeat([(job.id, job.execution_id, 600.0), (job.id, uuid.uuid4(), 600.0)]) == {
        job.id: False
    }
    job.refresh_from_db()
    assert job.lease_expires_at is not None and job.lease_expires_at > db_now() + dt.timedelta(seconds=590)
