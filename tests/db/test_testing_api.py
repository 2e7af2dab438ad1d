"""``django_jobs.testing``'s worker by hand: each step through the worker's own statement or
writer, each write after the claim fenced by its execution (a job taken over by the reaper and
another claim refuses the old execution's writes), the dashboard's queue rows, the statements a
block runs, and ``django_jobs.queue_depth()``."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest
from django.db import connections
from django.db.models.functions import Now

import django_jobs
from django_jobs import InvalidCheckpoint, InvalidProgress, LeaseLost, cancel, enqueue, enqueue_many
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.reads import queues as queue_figures
from django_jobs.registry import registry
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import (
    Claimed,
    capture_statements,
    claim,
    complete,
    context,
    fail,
    give_back,
    queue_rows,
    renew,
    report_progress,
    retry,
    run_jobs,
    save_checkpoint,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: What only the claim statement writes: the execution it mints.
CLAIM_MARK = "execution_id = gen_random_uuid()"


def _taken_over(stale: Claimed) -> Claimed:
    """Let ``stale``'s lease run out, the reaper take the job back, and a second claim take it."""
    Job.objects.filter(id=stale.job_id).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
    assert reaper.recover() == {"pending": 1}
    Job.objects.filter(id=stale.job_id).update(available_at=Now())  # past the recovery's backoff
    new = claim(worker_id="host:2:second")
    assert new is not None and new.job_id == stale.job_id and new.execution_id != stale.execution_id
    return new


# ---- claim --------------------------------------------------------------------------------------


def test_claim_takes_the_job_a_worker_would_take_next_without_running_it() -> None:
    assert claim() is None  # nothing to take
    later = enqueue("test.record", {"key": "later"}, delay=3600)
    first = enqueue("test.record", {"key": "a"})
    urgent = enqueue("test.record", {"key": "b"}, priority=10)

    claimed = claim(worker_id="host:1:mine")

    assert claimed is not None and claimed.job_id == urgent.id
    job = Job.objects.get(id=urgent.id)
    assert (job.status, job.attempts, job.worker_id) == (JobStatus.RUNNING, 1, "host:1:mine")
    assert (claimed.execution_id, claimed.attempt, claimed.max_attempts) == (
        job.execution_id,
        1,
        job.max_attempts,
    )
    assert (claimed.type, claimed.queue, claimed.payload, claimed.checkpoint) == (
        "test.record", "default", {"key": "b"}, None,
    )  # fmt: skip
    assert claimed.lease_seconds == registry.get("test.record").lease  # type: ignore[union-attr]
    assert job.lease_expires_at is not None and job.lease_expires_at > job.heartbeat_at
    assert claim(["emails"]) is None  # no job in that queue
    assert claim(types=["test.noop"]) is None  # nor of that type
    second = claim()
    assert second is not None and second.job_id == first.id
    assert claim() is None and Job.objects.get(id=later.id).status == JobStatus.PENDING


# ---- the running execution's writes ------------------------------------------------------------


def test_renew_extends_the_lease_and_learns_of_a_cancel_request() -> None:
    enqueue("test.record", {"key": "r"})
    claimed = claim()
    assert claimed is not None
    Job.objects.filter(id=claimed.job_id).update(lease_expires_at=Now() + dt.timedelta(seconds=5))

    renewal = renew(claimed)

    assert renewal and renewal.owned and not renewal.cancel_requested
    job = Job.objects.get(id=claimed.job_id)
    assert job.lease_expires_at is not None and job.heartbeat_at is not None
    assert job.lease_expires_at - job.heartbeat_at == dt.timedelta(seconds=claimed.lease_seconds)
    cancel(claimed.job_id, reason="changed my mind", actor="alice")
    assert renew(claimed).cancel_requested
    ctx = context(claimed)
    assert ctx.cancel_requested()  # the context shares what the renewal learnt


def test_progress_and_checkpoints_are_written_and_checked_as_the_context_writes_them() -> None:
    enqueue("test.checkpointed", {"steps": 3})
    claimed = claim()
    assert claimed is not None

    assert report_progress(claimed, 1, 3)
    assert save_checkpoint(claimed, {"next": 1})

    job = Job.objects.get(id=claimed.job_id)
    assert (job.progress, job.checkpoint) == ({"done": 1, "total": 3}, {"next": 1})
    with pytest.raises(InvalidProgress):
        report_progress(claimed, float("nan"))
    with pytest.raises(InvalidCheckpoint):
        save_checkpoint(claimed, {"next": (1, 2)})  # a tuple would come back a list
    # The next execution starts from the checkpoint.
    assert retry(claimed, delay=0) == JobStatus.PENDING
    Job.objects.filter(id=claimed.job_id).update(available_at=Now())
    again = claim()
    assert again is not None and (again.attempt, again.checkpoint) == (2, {"next": 1})


def test_a_handler_runs_with_the_context_of_the_held_execution() -> None:
    enqueue("test.checkpointed", {"steps": 2, "pause": 0})
    claimed = claim()
    assert claimed is not None
    handler = registry.get("test.checkpointed").handler  # type: ignore[union-attr]

    ctx = context(claimed)
    handler(ctx, claimed.payload)

    assert (ctx.job_id, ctx.execution_id, ctx.attempt) == (claimed.job_id, claimed.execution_id, 1)
    assert Job.objects.get(id=claimed.job_id).checkpoint == {"next": 2}
    assert complete(claimed) == JobStatus.COMPLETED


# ---- outcomes ------------------------------------------------------------------------------------


def test_complete_stores_the_result() -> None:
    job = enqueue("test.noop", {})
    claimed = claim()
    assert claimed is not None
    assert complete(claimed, {"charged": 2500}) == JobStatus.COMPLETED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.return_value) == (JobStatus.COMPLETED, 1, {"charged": 2500})
    assert job.completed_at is not None and job.execution_id == claimed.execution_id


def test_retry_schedules_after_the_delay_and_fails_the_last_attempt(db_now: Callable[[], Any]) -> None:
    job = enqueue("test.flaky", {"succeed_on": 9}, max_attempts=2)
    claimed = claim()
    assert claimed is not None

    assert retry(claimed, "the provider answered 503", code="PROVIDER_5XX", delay=60) == JobStatus.PENDING

    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 1, "PROVIDER_5XX")
    assert "the provider answered 503" in (job.last_error or "")
    assert job.available_at >= db_now() + dt.timedelta(seconds=59)
    event = JobEvent.objects.filter(job=job, kind=EventKind.RETRY_SCHEDULED).get()
    assert event.details["exception"] == "django_jobs.RetryableError"

    Job.objects.filter(id=job.id).update(available_at=Now())
    last = claim()
    assert last is not None and last.attempt == 2
    assert retry(last) == JobStatus.FAILED  # no attempt left


def test_fail_ends_the_job_whatever_attempts_it_has_left() -> None:
    job = enqueue("test.flaky", {"succeed_on": 9})
    claimed = claim()
    assert claimed is not None
    assert fail(claimed, "the account does not exist", code="ENTITY_NOT_FOUND") == JobStatus.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.FAILED, 1, "ENTITY_NOT_FOUND")
    assert job.attempts < job.max_attempts


def test_give_back_returns_the_job_uncounted() -> None:
    job = enqueue("test.noop", {})
    claimed = claim()
    assert claimed is not None
    assert give_back(claimed) == JobStatus.PENDING
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error_code) == (JobStatus.PENDING, 0, None)
    again = claim()
    assert again is not None and again.attempt == 1  # the attempt given back was not counted


# ---- fencing ------------------------------------------------------------------------------------


def test_an_execution_whose_job_was_taken_over_writes_nothing() -> None:
    enqueue("test.checkpointed", {"steps": 3})
    stale = claim(worker_id="host:1:first")
    assert stale is not None
    ctx = context(stale)
    new = _taken_over(stale)
    assert save_checkpoint(new, {"next": 2}) and report_progress(new, 2, 3)

    assert not renew(stale)
    assert report_progress(stale, 3, 3) is False
    assert save_checkpoint(stale, {"next": 3}) is False
    for record in (complete, retry, fail, give_back):
        assert record(stale) is None  # type: ignore[operator]
    with pytest.raises(LeaseLost):
        ctx.raise_if_cancelled()  # the context learnt it from the refused writes

    job = Job.objects.get(id=stale.job_id)
    assert (job.status, job.execution_id, job.worker_id) == (
        JobStatus.RUNNING,
        new.execution_id,
        "host:2:second",
    )
    assert (job.progress, job.checkpoint) == ({"done": 2, "total": 3}, {"next": 2})
    assert complete(new) == JobStatus.COMPLETED  # the new owner's write lands


def test_a_context_of_an_execution_taken_over_raises_lease_lost_at_its_next_write() -> None:
    enqueue("test.checkpointed", {"steps": 3})
    stale = claim()
    assert stale is not None
    ctx = context(stale)
    _taken_over(stale)
    with pytest.raises(LeaseLost):
        ctx.save_checkpoint({"next": 1})


# ---- the queue's rows and depth -------------------------------------------------------------------


def test_queue_rows_and_queue_depth_count_the_jobs_by_where_they_are() -> None:
    enqueue_many("test.noop", [{}] * 3)
    enqueue("test.noop", {}, delay=3600)
    enqueue("test.noop", {}, queue="emails")
    running = claim(["default"])
    assert running is not None
    failed = enqueue("test.noop", {}, queue="emails", priority=5)
    held = claim(["emails"])
    assert held is not None and held.job_id == failed.id and fail(held)

    (default,) = [row for row in queue_rows() if row.queue == "default"]
    assert (default.pending, default.due, default.running, default.failed) == (3, 2, 1, 0)

    depth = django_jobs.queue_depth("default")
    assert isinstance(depth, django_jobs.QueueDepth)
    assert (depth.queue, depth.pending, depth.due, depth.scheduled, depth.running, depth.stale) == (
        "default", 3, 2, 1, 1, 0,
    )  # fmt: skip
    assert depth.active == 4 and not depth.capped and depth.oldest_due_seconds is not None
    total = django_jobs.queue_depth()
    assert (total.queue, total.pending, total.due, total.running, total.failed) == (None, 4, 3, 1, 1)
    exact = django_jobs.queue_depth("default", exact=True)
    assert (exact.pending, exact.due, exact.running, exact.failed, exact.capped) == (3, 2, 1, 0, False)
    exact_total = django_jobs.queue_depth(exact=True)
    assert (exact_total.pending, exact_total.due, exact_total.running, exact_total.failed) == (4, 3, 1, 1)
    assert django_jobs.queue_depth("nowhere") == django_jobs.queue_depth("nowhere", exact=True)
    assert django_jobs.queue_depth("nowhere").active == 0


def test_a_capped_depth_says_so_and_an_exact_one_counts_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    enqueue_many("test.noop", [{}] * 5)
    monkeypatch.setattr(queue_figures, "COUNT_CAP", 3)
    capped = django_jobs.queue_depth("default")
    assert (capped.pending, capped.capped) == (3, True)
    exact = django_jobs.queue_depth("default", exact=True)
    assert (exact.pending, exact.due, exact.capped) == (5, 5, False)


# ---- statements ---------------------------------------------------------------------------------


def test_capture_statements_sees_the_claim_and_the_outcome_write() -> None:
    enqueue("test.noop", {})
    with capture_statements() as captured:
        claimed = claim()
        assert claimed is not None
        renew(claimed)
        complete(claimed)

    (claim_statement,) = captured.containing(CLAIM_MARK)
    assert claim_statement.alias == "default" and claim_statement.seconds >= 0
    assert claim_statement.thread == threading.current_thread().name
    assert captured.containing("lease_expires_at = CASE WHEN b.lease > 0")  # the heartbeat
    assert captured.containing("return_value = d.result")  # the outcome write
    assert captured.sql.index(claim_statement.sql) < captured.sql.index(
        captured.containing("return_value = d.result")[0].sql
    )
    # Closed, it records nothing more, and the hot statements bypass the wrappers again.
    before = len(captured)
    seen: list[str] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    enqueue("test.noop", {})
    with connections["default"].execute_wrapper(watch):
        again = claim()
    assert again is not None and len(captured) == before
    assert not [sql for sql in seen if CLAIM_MARK in sql]


def test_while_a_capture_is_open_every_execute_wrapper_sees_the_hot_statements() -> None:
    enqueue("test.noop", {})
    seen: list[str] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with capture_statements(), connections["default"].execute_wrapper(watch):
        assert claim() is not None
    assert [sql for sql in seen if CLAIM_MARK in sql]


def test_capture_statements_sees_a_real_workers_threads() -> None:
    enqueue_many("test.noop", [{}] * 3)
    with capture_statements() as captured:
        stats = run_jobs(concurrency=2)
    assert stats.outcomes["completed"] == 3
    assert captured.containing(CLAIM_MARK)  # the worker's loop claims on the calling thread
    # Its outcome writer and heartbeat have threads (and connections) of their own.
    writes = captured.containing("return_value = d.result")
    assert writes and {s.thread for s in writes} == {"django_jobs-writer"}
    assert any(s.thread == "django_jobs-heartbeat" for s in captured)


def test_an_execute_wrapper_block_that_ends_inside_a_capture_takes_only_its_own_wrapper() -> None:
    def watch(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        return execute(sql, params, many, context)

    connection = connections["default"]
    with ExitStack() as capture:
        with connection.execute_wrapper(watch):
            captured = capture.enter_context(capture_statements())
        assert watch not in connection.execute_wrappers  # Django's block popped its own
        enqueue("test.noop", {})
        assert captured.containing("INSERT INTO")  # and the capture still records
    assert connection.execute_wrappers == []
