"""Whatever a handler does, the worker holds, and the system can still say where every job is.

Each test names the way a handler (or the database under it) misbehaves, and runs the real
worker in this process against real PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.core import checks
from django.db import DataError, connection
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.checks import check_upcasters
from django_jobs.decision import MAX_RETRY_DELAY, Happened
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.registry import job, registry
from django_jobs.runtime import outcomes
from django_jobs.runtime.executor import Finished
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Beat, ClaimStatement, Outcome, cancel, claim, heartbeat, write_outcomes
from testproject.testjobs import jobs as testjobs
from testproject.testjobs.models import BusinessRow
from tests.db.inprocess import BackgroundWorker, run_worker, wait_for
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {"LEASE_TIMEOUT": 1.0, "HEARTBEAT_INTERVAL": 0.1, "REAPER_INTERVAL": 0.2, "POLL_INTERVAL": 0.02}


@pytest.fixture(autouse=True)
def fast_leases() -> Iterator[None]:
    testjobs.UNBLOCK.clear()
    with override_settings(DJANGO_JOBS=FAST):
        yield
    testjobs.UNBLOCK.set()  # no handler of this test stays blocked past it


def _status(job: Job) -> str:
    return Job.objects.get(id=job.id).status


# 1 ------------------------------------------------------------------------------------------


def test_async_handler_is_awaited_not_marked_completed_unrun() -> None:
    ok = enqueue("test.async", {})
    failing = enqueue("test.async", {"fail": True})
    run_worker(concurrency=2)
    assert _status(ok) == JobStatus.COMPLETED
    assert BusinessRow.objects.filter(key=f"async:{ok.id}:1").exists()
    failing.refresh_from_db()
    assert (failing.status, failing.last_error_code, failing.attempts) == (
        JobStatus.PENDING,
        "ASYNC_FAILED",
        1,
    )


# 2 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("nul", JobStatus.PENDING, "UNKNOWN"),
        ("long_code", JobStatus.PENDING, "E" * 100),
        ("object_code", JobStatus.PENDING, "UNKNOWN"),
        ("int_code", JobStatus.FAILED, "503"),
        ("inf_retry", JobStatus.PENDING, "RATE_LIMITED"),
        ("nan_retry", JobStatus.PENDING, "RATE_LIMITED"),
        ("huge_retry", JobStatus.PENDING, "RATE_LIMITED"),
        ("huge_error", JobStatus.PENDING, "UNKNOWN"),
    ],
)
def test_hostile_error_ends_its_own_job_and_no_other(kind: str, status: str, code: str) -> None:
    bad = enqueue("test.hostile_once", {"kind": kind})
    others = [enqueue("test.noop", {}) for _ in range(5)]
    worker = run_worker()  # returns: the worker did not die of the job's data
    bad.refresh_from_db()
    assert (bad.status, bad.last_error_code, bad.attempts) == (status, code, 1)
    assert "\x00" not in (bad.last_error or "") and len(bad.last_error or "") <= 8000
    assert all(_status(j) == JobStatus.COMPLETED for j in others)
    assert worker.stats.outcomes[JobStatus.COMPLETED] == 5
    if kind in ("inf_retry", "huge_retry"):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT extract(epoch FROM available_at - now()) FROM django_jobs_job WHERE id = %s", [bad.id]
            )
            assert float(cursor.fetchone()[0]) == pytest.approx(MAX_RETRY_DELAY, rel=0.01)


def test_a_batch_the_database_refuses_is_written_row_by_row_and_only_the_bad_row_fails() -> None:
    jobs = [enqueue("test.noop", {}) for _ in range(3)]
    claims = claim(ClaimStatement("w", None, {"test.noop": 1}), 10)
    good = [Outcome(c.id, c.execution_id, JobStatus.COMPLETED) for c in claims[:2]]
    # An outcome that bypassed sanitising: PostgreSQL refuses NUL in text.
    poisoned = Outcome(claims[2].id, claims[2].execution_id, JobStatus.FAILED, error_code="X", error="a\x00b")
    with pytest.raises(DataError):
        write_outcomes([*good, poisoned])
    written = outcomes._write([*good, poisoned])
    assert {job_id: outcome.status for job_id, outcome in written.items()} == {
        claims[0].id: JobStatus.COMPLETED,
        claims[1].id: JobStatus.COMPLETED,
        claims[2].id: JobStatus.FAILED,
    }
    assert written[claims[2].id].error_code == "OUTCOME_INVALID"  # what was written, not what was asked
    failed = Job.objects.get(id=claims[2].id)
    assert failed.last_error_code == "OUTCOME_INVALID" and "could not be stored" in failed.last_error
    assert {j.id for j in jobs} == {c.id for c in claims}


# 3 ------------------------------------------------------------------------------------------


def test_a_blocked_handler_hoards_no_prefetched_jobs() -> None:
    """One slot, stuck in a call without a timeout: what it prefetched goes back, unstarted and
    uncounted, and another worker runs it."""
    warm_up = [enqueue("test.noop", {}, priority=20) for _ in range(5)]
    blocker = enqueue("test.blocked", {"seconds": 60})
    backlog = [enqueue("test.noop", {}) for _ in range(30)]
    with BackgroundWorker(concurrency=1, batch_size=50) as first:
        wait_for(
            lambda: _status(blocker) == JobStatus.RUNNING and all(_status(j) == "completed" for j in warm_up)
        )
        with BackgroundWorker(concurrency=2) as second:
            wait_for(lambda: all(_status(j) == JobStatus.COMPLETED for j in backlog), timeout=15)
        assert _status(blocker) == JobStatus.RUNNING  # still blocked, and still owned
        testjobs.UNBLOCK.set()
        wait_for(lambda: _status(blocker) == JobStatus.COMPLETED)
    assert first.stats.released > 0
    rows = Job.objects.filter(id__in=[j.id for j in backlog])
    # Given back without counting an attempt: each ran once, and counts one.
    assert set(rows.values_list("attempts", flat=True)) == {1}
    released = JobEvent.objects.filter(job__in=backlog, kind=EventKind.RELEASED)
    assert released.count() == first.stats.released + second.stats.released
    assert all(e.attempt == 0 and e.to_status == JobStatus.PENDING for e in released)


# 4 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["system_exit", "keyboard_interrupt", "cancelled_error", "generator_exit", "unprintable"]
)
def test_a_base_exception_from_a_handler_becomes_an_outcome_and_the_worker_goes_on(kind: str) -> None:
    bad = enqueue("test.hostile_once", {"kind": kind})
    after = [enqueue("test.noop", {}) for _ in range(3)]
    run_worker()  # a burst worker returns: its slot survived
    bad.refresh_from_db()
    expected_code = "UNKNOWN" if kind == "unprintable" else "BASE_EXCEPTION"
    assert (bad.status, bad.attempts, bad.last_error_code) == (JobStatus.PENDING, 1, expected_code)
    assert all(_status(j) == JobStatus.COMPLETED for j in after)


# 5 ------------------------------------------------------------------------------------------


def test_a_prefetched_job_lost_before_it_started_uses_no_attempt() -> None:
    job = enqueue("test.noop", {}, max_attempts=1)
    [held] = claim(ClaimStatement("w", None, {"test.noop": 1}), 1, start_now=0)
    assert not held.counted and held.attempt == 1
    assert Job.objects.get(id=job.id).attempts == 0  # not counted until it starts
    Job.objects.filter(id=job.id).update(lease_expires_at=Job.objects.get(id=job.id).heartbeat_at)
    # Its worker died (SIGKILL, OOM) before it started: pending again, attempts untouched, not
    # failed although it was its last attempt.
    assert reaper.recover() == {"pending": 1}
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 0, "LOST_UNSTARTED")
    # Lost once unstarted: it is taken only for an idle thread and counted at once, so a job
    # that kills its worker before its start is recorded still uses up its attempts.
    statement = ClaimStatement("w", None, {"test.noop": 1})
    assert claim(statement, 1, start_now=0) == []  # never prefetched
    [again] = claim(statement, 1, start_now=1)
    assert again.counted and Job.objects.get(id=job.id).attempts == 1


def test_a_job_whose_retry_is_unsafe_is_never_prefetched() -> None:
    unsafe = enqueue("test.unsafe", {})
    safe = enqueue("test.noop", {})
    statement = ClaimStatement("w", None, {"test.unsafe": 1, "test.noop": 1})
    assert [c.id for c in claim(statement, 10, start_now=0)] == [safe.id]
    assert _status(unsafe) == JobStatus.PENDING
    [taken] = claim(statement, 10, start_now=1)
    assert taken.id == unsafe.id and taken.counted


def test_a_prefetched_job_is_counted_when_its_start_is_recorded(db_now: Callable[[], object]) -> None:
    job = enqueue("test.noop", {})
    [held] = claim(ClaimStatement("w", None, {"test.noop": 1}), 1, start_now=0)
    # The heartbeat records the start of an execution that began since the last beat.
    assert heartbeat([Beat(held.id, held.execution_id, 60.0, ran_for=0.5)]) == {held.id: False}
    job.refresh_from_db()
    assert job.attempts == 1
    assert job.started_at == pytest.approx(
        db_now() - dt.timedelta(seconds=0.5), abs=dt.timedelta(seconds=0.5)
    )
    # Recorded once: a second beat, or the outcome, does not count it again.
    heartbeat([Beat(held.id, held.execution_id, 60.0, ran_for=0.7)])
    assert outcomes.write([Finished(held, Happened.COMPLETED, ran_for=0.8)]) == {held.id: JobStatus.COMPLETED}
    assert Job.objects.get(id=job.id).attempts == 1


# 6 ------------------------------------------------------------------------------------------


def test_reaper_decides_by_the_policy_stored_on_the_row_not_its_own_registry() -> None:
    stale = JobFactory(running_stale=True, type="billing.transfer", on_lost="needs_review")
    assert registry.get("billing.transfer") is None  # this process does not know the type
    assert reaper.recover() == {"needs_review": 1}
    assert _status(stale) == JobStatus.NEEDS_REVIEW


# 7 ------------------------------------------------------------------------------------------


def test_a_cancel_request_survives_a_retryable_failure() -> None:
    job = enqueue("test.cancel_then_fail", {})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED  # not pending, to run again
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))
    assert kinds == [EventKind.CANCEL_REQUESTED, EventKind.CANCELLED]


def test_a_cancel_request_survives_the_reaper() -> None:
    stale = JobFactory(running_stale=True, cancel_requested_at=dt.datetime.now(dt.UTC))
    assert reaper.recover() == {"cancelled": 1}
    assert _status(stale) == JobStatus.CANCELLED


def test_a_job_without_heartbeat_still_learns_of_a_cancel_request() -> None:
    job = enqueue("test.quiet_long", {"seconds": 30})
    with BackgroundWorker():
        wait_for(lambda: BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").exists())
        assert cancel(job.id) == "requested"
        wait_for(lambda: _status(job) == JobStatus.CANCELLED, timeout=5)
    assert not BusinessRow.objects.filter(key__startswith="finished:").exists()
    # Its lease was never extended: it runs on its lease alone.
    assert not JobEvent.objects.filter(job=job, kind=EventKind.RECOVERED).exists()


# 8 ------------------------------------------------------------------------------------------


def test_a_parked_job_keeps_its_unique_key() -> None:
    parked = JobFactory(status=JobStatus.NEEDS_REVIEW, type="test.unsafe", unique_key="transfer:42")
    again = enqueue("test.unsafe", {}, unique_key="transfer:42")
    assert again.id == parked.id  # no second run behind the reviewer's back
    assert Job.objects.filter(unique_key="transfer:42").count() == 1


# 9 ------------------------------------------------------------------------------------------


def test_side_writes_inside_a_handler_transaction_do_not_stall_other_leases() -> None:
    """progress/checkpoint/heartbeat inside the handler's atomic() go through the worker's
    connection: the job row is not locked until the handler commits, so the one-statement
    heartbeat of the worker's other job goes on and its short lease holds."""
    side = enqueue("test.atomic_side_writes", {"seconds": 2.5})
    other = enqueue("test.long", {"seconds": 2.5})
    with override_settings(DJANGO_JOBS={**FAST, "LEASE_TIMEOUT": 0.6}):
        worker = run_worker(concurrency=2, reap=True)
    assert _status(side) == JobStatus.COMPLETED and _status(other) == JobStatus.COMPLETED
    assert not JobEvent.objects.filter(kind=EventKind.RECOVERED).exists()
    assert worker.stats.lost == 0
    side.refresh_from_db()
    assert side.checkpoint == {"step": 1} and side.progress == {"done": 1, "total": 2}


# 10 -----------------------------------------------------------------------------------------


def test_shutdown_past_grace_never_gives_back_a_job_still_running() -> None:
    job = enqueue("test.long", {"seconds": 1.5})
    background = BackgroundWorker(grace=0.2)
    with background as worker:
        wait_for(lambda: BusinessRow.objects.filter(key__startswith=f"started:{job.id}:").exists())
    # The worker stopped waiting; the thread still runs the job, so it is not claimable.
    assert worker.abandoned and _status(job) == JobStatus.RUNNING
    assert not JobEvent.objects.filter(job=job, kind=EventKind.RELEASED).exists()
    # The lease decides: here the execution finished in time and wrote its outcome.
    wait_for(lambda: _status(job) == JobStatus.COMPLETED, timeout=5)
    assert BusinessRow.objects.filter(key__startswith=f"finished:{job.id}:").count() == 1


# 11 -----------------------------------------------------------------------------------------


def test_a_gap_in_the_upcaster_chain_is_a_check_error_and_old_jobs_wait() -> None:
    name = f"test.gap_{uuid.uuid4().hex[:8]}"

    @job(name, version=3, upcasters={1: lambda p: p})  # 1 → 2 is there, 2 → 3 is missing
    def handler(ctx: object, payload: object) -> None:
        raise AssertionError("an old payload must not reach the handler un-upcast")

    try:
        errors = check_upcasters()
        assert [e.id for e in errors] == ["django_jobs.E009"]
        assert isinstance(errors[0], checks.Error) and "no upcaster from version 2" in errors[0].msg
        old = [JobFactory(type=name, version=1), JobFactory(type=name, version=2)]
        readable = JobFactory(type=name, version=3)
        oldest = registry.get(name).oldest_readable_version  # type: ignore[union-attr]
        claimed = claim(ClaimStatement("w", None, {name: 3}, oldest={name: oldest}), 10)
        assert [c.id for c in claimed] == [readable.id]
        assert all(_status(j) == JobStatus.PENDING for j in old)  # left for a worker that can read them
    finally:
        registry.unregister(name)
    assert check_upcasters() == []


# 12 -----------------------------------------------------------------------------------------


def test_the_deadline_a_handler_sees_is_in_database_time() -> None:
    job = enqueue("test.deadline", {})
    run_worker()
    job.refresh_from_db()
    row = BusinessRow.objects.get(key__startswith=f"deadline:{job.id}:")
    seen = float(row.key.rsplit(":", 1)[1])
    expected = (job.started_at + dt.timedelta(seconds=120)).timestamp()
    assert seen == pytest.approx(expected, abs=0.5)


def test_outcome_for_a_lost_execution_is_never_written() -> None:
    enqueue("test.noop", {})
    [held] = claim(ClaimStatement("w", None, {"test.noop": 1}), 1)
    assert outcomes.write([Finished(held, None)]) == {}
    assert outcomes.write([Finished(held, Happened.COMPLETED, ran_for=0.0)]) == {held.id: JobStatus.COMPLETED}


# Unbounded writes from handlers ----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["huge", "not_json"])
def test_a_checkpoint_that_cannot_be_stored_is_a_clear_error_and_keeps_the_last_good_one(bad: str) -> None:
    job = enqueue("test.bad_reports", {"what": "checkpoint", "good": {"step": 3}, "bad": bad})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.last_error_code) == (JobStatus.FAILED, "CHECKPOINT_INVALID")
    assert job.checkpoint == {"step": 3}  # nothing half-written
    assert "nothing was written" in (job.last_error or "")


@pytest.mark.parametrize("bad", ["nan", "text"])
def test_progress_that_is_not_a_number_is_a_clear_error(bad: str) -> None:
    job = enqueue("test.bad_reports", {"what": "progress", "bad": bad})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.last_error_code, job.progress) == (JobStatus.FAILED, "PROGRESS_INVALID", None)
