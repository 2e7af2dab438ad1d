"""Acting on every job a filter matches (``django_jobs.retry_matching`` / ``cancel_matching``):
the operation takes the jobs with the state it saw, its job acts on them in fenced batches, skips
what changed, resumes after a failure without acting twice, and its record agrees with the
jobs' events. Bad input is refused before anything is written."""

from __future__ import annotations

import datetime as dt
import uuid
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

import django_jobs
from django_jobs import InvalidFilter, JobFilter
from django_jobs.console import bulk, bulk_runner
from django_jobs.console.job_filter import parse_moment
from django_jobs.models import BulkOperation, BulkOperationJob, BulkOutcome, BulkState, Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.db.inprocess import run_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

CODE = "PROVIDER_DOWN"
#: The jobs acted on live in this queue: the test's worker serves only the operation's.
PAYMENTS = "payments"


def failed(n: int, **fields: Any) -> list[Job]:
    fields = {"queue": PAYMENTS, "last_error_code": CODE, **fields}
    return [JobFactory(failed=True, execution_id=uuid.uuid4(), **fields) for _ in range(n)]


def carry_out() -> None:
    """Run the operations' jobs (queue default) to the end, leaving the jobs acted on alone."""
    run_worker(queues=["default"])


def operation_events(operation: BulkOperation) -> list[JobEvent]:
    return list(JobEvent.objects.filter(details__operation=operation.id).order_by("job_id"))


def test_retry_matching_retries_every_job_the_filter_matches_and_records_it() -> None:
    alice = User.objects.create_user("alice")
    wanted = failed(5)
    failed(2, last_error_code="OTHER")
    failed(1, queue="default")
    JobFactory(completed=True, queue=PAYMENTS, last_error_code=CODE)
    job_filter = JobFilter(status="failed", code=CODE, queue=PAYMENTS)

    seen = django_jobs.matching("retry", job_filter)
    assert (seen.count, seen.exact) == (5, True)
    assert [job.id for job in seen.sample] == sorted((job.id for job in wanted), reverse=True)

    operation = django_jobs.retry_matching(job_filter, reason="provider back", actor=alice, pace=1000)
    assert (operation.total, operation.state, operation.actor) == (5, BulkState.RUNNING, "alice")
    assert operation.filter == {"status": "failed", "queue": PAYMENTS, "code": CODE}
    carry_out()

    operation.refresh_from_db()
    assert (operation.state, operation.done, operation.skipped) == (BulkState.DONE, 5, 0)
    assert operation.finished_at is not None
    for job in wanted:
        job.refresh_from_db()
        assert (job.status, job.manual_retries, job.retried_by) == (JobStatus.PENDING, 1, "alice")
    events = operation_events(operation)
    assert [event.job_id for event in events] == sorted(job.id for job in wanted)
    assert {(e.kind, e.actor, e.reason) for e in events} == {
        (EventKind.MANUAL_RETRY, "alice", "provider back")
    }
    assert all(event.details["manual_retries"] == 1 for event in events)
    # The rest are untouched.
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3
    # One admin log entry: the operation's, not one per job.
    entry = LogEntry.objects.get()
    assert entry.object_id == str(operation.id) and "5 jobs" in entry.get_change_message()
    # The carrying job says how it ended.
    runner = Job.objects.get(id=operation.job_id)
    assert runner.type == "django_jobs.bulk" and runner.status == JobStatus.COMPLETED
    assert runner.return_value == {"operation": operation.id, "state": "done", "done": 5, "skipped": 0}


def test_jobs_that_changed_after_the_operation_took_them_are_skipped_not_forced() -> None:
    jobs = failed(4)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="provider back", pace=1000)
    # Meanwhile: one retried by hand (now pending), one retried and failed again (same status,
    # another execution), one pruned, one with its unique key taken by a newer live job.
    django_jobs.retry(jobs[0].id, reason="by hand", actor="bob")
    Job.objects.filter(id=jobs[1].id).update(execution_id=uuid.uuid4(), attempts=1)
    Job.objects.filter(id=jobs[2].id).delete()
    Job.objects.filter(id=jobs[3].id).update(unique_key="order-9")
    JobFactory(unique_key="order-9", queue=PAYMENTS)
    carry_out()

    operation.refresh_from_db()
    assert (operation.state, operation.done, operation.skipped) == (BulkState.DONE, 0, 4)
    outcomes = dict(BulkOperationJob.objects.filter(operation=operation).values_list("job_id", "outcome"))
    assert outcomes == {
        jobs[0].id: BulkOutcome.CHANGED,
        jobs[1].id: BulkOutcome.CHANGED,
        jobs[2].id: BulkOutcome.GONE,
        jobs[3].id: BulkOutcome.KEY_HELD,
    }
    assert operation_events(operation) == []
    jobs[0].refresh_from_db()
    assert jobs[0].manual_retries == 1  # bob's retry alone
    jobs[1].refresh_from_db()
    assert jobs[1].status == JobStatus.FAILED


def test_a_job_retried_and_cancelled_again_since_is_told_apart_by_its_manual_retries() -> None:
    """Cancelled before it ran, it has no execution; retried and cancelled again, it is back in
    the status seen, still with none: only its count of manual retries has moved."""
    job = JobFactory(status=JobStatus.CANCELLED, queue=PAYMENTS, type="test.record")
    operation = django_jobs.retry_matching(JobFilter(type="test.record"), reason="r", pace=1000)
    django_jobs.retry(job.id, reason="by hand", actor="bob")
    django_jobs.cancel(job.id, reason="not yet", actor="bob")
    job.refresh_from_db()
    assert (job.status, job.execution_id, job.manual_retries) == (JobStatus.CANCELLED, None, 1)
    carry_out()
    operation.refresh_from_db()
    assert (operation.done, operation.skipped) == (0, 1)
    job.refresh_from_db()
    assert (job.status, job.manual_retries) == (JobStatus.CANCELLED, 1)


def test_a_batch_that_fails_midway_is_rolled_back_and_the_next_attempt_acts_on_each_job_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = failed(7)
    monkeypatch.setattr(bulk_runner, "BATCH_LIMIT", 3)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="provider back", pace=1000)
    real = bulk_runner._act_on_one
    acted: list[int] = []

    def dies_on_the_fifth(operation: BulkOperation, job_id: int, seen: Any) -> str:
        if len(acted) == 4:  # the second batch has acted on one job already
            raise ConnectionError("the database went away")
        acted.append(job_id)
        return real(operation, job_id, seen)

    monkeypatch.setattr(bulk_runner, "_act_on_one", dies_on_the_fifth)
    with pytest.raises(ConnectionError):
        while True:
            bulk_runner._one_batch(operation.id)
    operation.refresh_from_db()
    assert (operation.done, operation.last_job_id) == (3, jobs[2].id)  # the first batch stands alone
    assert Job.objects.filter(status=JobStatus.PENDING, id__in=[j.id for j in jobs]).count() == 3

    monkeypatch.setattr(bulk_runner, "_act_on_one", real)
    carry_out()
    operation.refresh_from_db()
    assert (operation.state, operation.done, operation.skipped) == (BulkState.DONE, 7, 0)
    assert [event.job_id for event in operation_events(operation)] == [job.id for job in jobs]
    assert set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("manual_retries", flat=True)) == {
        1
    }


def test_cancel_matching_cancels_pending_jobs_and_asks_running_ones_to_stop() -> None:
    pending = JobFactory(queue=PAYMENTS, type="test.record")
    running = JobFactory(running=True, queue=PAYMENTS, type="test.record")
    asked = JobFactory(running=True, queue=PAYMENTS, type="test.record", cancel_requested_at=timezone.now())
    ended = JobFactory(completed=True, queue=PAYMENTS, type="test.record")
    job_filter = JobFilter(type="test.record")
    assert django_jobs.matching("cancel", job_filter).count == 2

    operation = django_jobs.cancel_matching(job_filter, reason="duplicate campaign", actor="ops")
    assert operation.pace == bulk.DEFAULT_PACE["cancel"]
    carry_out()
    operation.refresh_from_db()
    assert (operation.state, operation.done, operation.total) == (BulkState.DONE, 2, 2)
    for job, status in (
        (pending, JobStatus.CANCELLED),
        (running, JobStatus.RUNNING),
        (ended, JobStatus.COMPLETED),
    ):
        job.refresh_from_db()
        assert job.status == status
    running.refresh_from_db()
    assert running.cancel_requested_at is not None
    kinds = {event.job_id: event.kind for event in operation_events(operation)}
    assert kinds == {pending.id: EventKind.CANCELLED, running.id: EventKind.CANCEL_REQUESTED}
    assert not JobEvent.objects.filter(job=asked).exists()


def test_a_stopped_operation_acts_on_no_further_job(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = failed(5)
    monkeypatch.setattr(bulk_runner, "BATCH_LIMIT", 2)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="provider back", pace=1000)
    bulk_runner._one_batch(operation.id)
    assert django_jobs.stop_operation(operation.id, reason="it is down again", actor="ops") is True
    assert django_jobs.stop_operation(operation.id, reason="twice", actor="ops") is False
    carry_out()
    operation.refresh_from_db()
    assert (operation.state, operation.done, operation.cancelled_by) == (BulkState.CANCELLED, 2, "ops")
    assert operation.cancel_reason == "it is down again"
    assert Job.objects.filter(id__in=[j.id for j in jobs], status=JobStatus.FAILED).count() == 3
    assert BulkOperationJob.objects.filter(operation=operation, outcome__isnull=True).count() == 3
    with pytest.raises(LookupError):
        django_jobs.stop_operation(10**12, reason="none", actor="ops")


def test_the_pace_spaces_the_batches() -> None:
    failed(6)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="slowly", pace=3)
    began = timezone.now()
    carry_out()
    operation.refresh_from_db()
    assert operation.done == 6
    # Two batches of three at three a second: the second starts a second after the first.
    events = operation_events(operation)
    assert events[3].created_at - events[0].created_at >= dt.timedelta(seconds=0.9)
    assert timezone.now() - began >= dt.timedelta(seconds=0.9)


def test_the_pace_is_a_cap_on_every_second_not_an_average(monkeypatch: pytest.MonkeyPatch) -> None:
    # Batches of at most 8 (as 200 are for a real pace): 20 a second takes three batches a
    # second. Batches of 8 every 0.4 s would average 20 a second yet put 24 in some seconds.
    monkeypatch.setattr(bulk_runner, "BATCH_LIMIT", 8)
    pace, jobs = 20, failed(60)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="slowly", pace=pace)
    carry_out()
    operation.refresh_from_db()
    assert operation.done == len(jobs)
    # When each job was retried: its event's time.
    acted_at = sorted(event.created_at for event in operation_events(operation))
    assert len(acted_at) == len(jobs)
    second = dt.timedelta(seconds=1)
    for start in acted_at:  # a window opening on a write holds the most any window does
        assert sum(start <= moment < start + second for moment in acted_at) <= pace, start
    # ...and at the pace, near enough: nine batches (7, 7, 6, 7, 7, 6, 7, 7, 6), 1/3 s apart.
    took = (acted_at[-1] - acted_at[0]).total_seconds()
    assert 8 / 3 <= took < 8 / 3 + 1.0, took


@pytest.mark.parametrize("pace", [1, 3, 20, 199, 200, 201, 250, 401, 999, 10_000])
def test_any_seconds_worth_of_batches_adds_up_to_the_pace(pace: int) -> None:
    per_second = bulk_runner.batches_a_second(pace)
    sizes = [bulk_runner.batch_size(pace, index) for index in range(3 * per_second + 2)]
    assert max(sizes) <= bulk_runner.BATCH_LIMIT and min(sizes) >= 1
    for first in range(len(sizes) - per_second + 1):
        assert sum(sizes[first : first + per_second]) == pace


# ---- refused before anything is written -------------------------------------------------------


def nothing_written() -> bool:
    return not BulkOperation.objects.exists() and not Job.objects.filter(type="django_jobs.bulk").exists()


@pytest.mark.parametrize("reason", ["", "   ", "a\x00b", "x" * 2001, None, 7])
def test_a_missing_or_unstorable_reason_is_refused(reason: Any) -> None:
    failed(1)
    with pytest.raises(ValueError, match=r"reason|Say why"):
        django_jobs.retry_matching(JobFilter(code=CODE), reason=reason)
    assert nothing_written()


@pytest.mark.parametrize("pace", [0, -1, 10_001, 2.5, True, "10"])
def test_a_bad_pace_is_refused(pace: Any) -> None:
    failed(1)
    with pytest.raises(ValueError, match="pace"):
        django_jobs.retry_matching(JobFilter(code=CODE), reason="r", pace=pace)
    assert nothing_written()


def test_a_filter_that_matches_nothing_is_refused() -> None:
    failed(1)
    with pytest.raises(bulk.NothingMatches, match="no job matches"):
        django_jobs.retry_matching(JobFilter(code="NEVER_SEEN"), reason="r")
    # Matching jobs, none of which the action applies to.
    with pytest.raises(bulk.NothingMatches):
        django_jobs.cancel_matching(JobFilter(code=CODE), reason="r")
    assert nothing_written()


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"status": "borked"}, "status"),
        ({"status": "pending"}, None),  # valid, but a retry cannot apply: refused by the action
        ({"queue": "no such queue!"}, "queue"),
        ({"type": "a b"}, "type"),
        ({"code": "x" * 500}, "code"),
        ({"workflow": -1}, "workflow"),
        ({"workflow": True}, "workflow"),
        ({"search": ""}, "search"),
        ({"search": "a\x00"}, "NUL"),
        ({"status": "pending", "ended_since": timezone.now()}, "has not ended"),
        ({"ended_since": dt.datetime(2026, 1, 1)}, "time zone"),  # naive on purpose
        ({"ended_since": timezone.now(), "ended_until": timezone.now() - dt.timedelta(hours=1)}, "before"),
        ({"colour": "red"}, "unknown"),
    ],
)
def test_a_bad_filter_is_refused_with_what_was_wrong(parts: dict[str, Any], message: str | None) -> None:
    failed(1)
    with pytest.raises(InvalidFilter, match=message or "only failed"):
        django_jobs.retry_matching(JobFilter.from_dict(parts), reason="r")
    assert nothing_written()


def test_an_unknown_queue_or_type_is_named() -> None:
    failed(1)
    with pytest.raises(InvalidFilter, match="no job has queue 'paymnets'"):
        django_jobs.matching("retry", JobFilter(queue="paymnets"))
    with pytest.raises(InvalidFilter, match=r"no job has type 'shop\.refnud'"):
        django_jobs.retry_matching(JobFilter(type="shop.refnud"), reason="r")
    with pytest.raises(InvalidFilter, match="not an action"):
        django_jobs.matching("delete", JobFilter())
    assert nothing_written()


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "", "2h ago", "9" * 50, "1w", "\x00"])
def test_a_malformed_time_is_refused(text: str) -> None:
    with pytest.raises(InvalidFilter):
        JobFilter.from_dict({"ended_since": text})
    with pytest.raises(InvalidFilter):
        parse_moment(text, "since")


def test_times_as_people_write_them() -> None:
    now = timezone.now()
    assert parse_moment("2h", now=now) == now - dt.timedelta(hours=2)
    assert parse_moment(" 30m ", now=now) == now - dt.timedelta(minutes=30)
    moment = parse_moment("2026-12-04T14:00")
    assert timezone.is_aware(moment) and moment.hour == 14
    assert parse_moment("2026-12-04T14:00+03:00").utcoffset() == dt.timedelta(hours=3)


def test_more_matches_than_one_operation_takes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MAX_OPERATION_JOBS", 40)
    failed(41)
    seen = django_jobs.matching("retry", JobFilter(code=CODE))
    assert seen.over_cap and seen.count == 41 and seen.exact
    with pytest.raises(bulk.TooManyMatches, match="more than 40 jobs match"):
        django_jobs.retry_matching(JobFilter(code=CODE), reason="r")
    assert nothing_written()


def test_a_count_far_over_the_cap_is_the_planners_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MAX_OPERATION_JOBS", 10)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts, "
            "max_attempts, last_error_code, finished_at, available_at) "
            "SELECT 'payments', 'test.noop', 1, '{}', 'failed', 0, 5, 5, 'PROVIDER_DOWN', now(), now() "
            "FROM generate_series(1, 2000)"
        )
        cursor.execute("ANALYZE django_jobs_job")
    seen = django_jobs.matching("retry", JobFilter(code=CODE))
    assert not seen.exact and seen.over_cap and seen.count > 100
    assert len(seen.sample) == bulk.SAMPLE_SIZE


# ---- from the command line ----------------------------------------------------------------------


def jobs(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_line_is_a_dry_run_until_told_to_apply() -> None:
    wanted = failed(3)
    failed(1, last_error_code="OTHER")
    out, _ = jobs("retry", "--status", "failed", "--code", CODE, "--since", "1h", "--reason", "provider back")
    assert "would retry 3 job(s) matching status=failed, code=PROVIDER_DOWN, ended_since=" in out
    assert all(str(job.id) in out for job in wanted)
    assert "Dry run: nothing changed" in out
    assert nothing_written()

    out, _ = jobs(
        "retry", "--code", CODE, "--reason", "provider back", "--actor", "ops", "--apply", "--pace", "500"
    )
    operation = BulkOperation.objects.get()
    assert f"operation {operation.id} started: retry of 3 job(s)" in out
    assert (operation.actor, operation.pace) == ("ops", 500)
    carry_out()
    out, _ = jobs("operation", str(operation.id))
    assert "done: 3 done, 0 skipped, 0 left" in out


def test_the_command_line_stops_an_operation() -> None:
    failed(2)
    operation = django_jobs.retry_matching(JobFilter(code=CODE), reason="r", actor="ops")
    with pytest.raises(CommandError, match="say why"):
        jobs("operation", str(operation.id), "--stop")
    out, _ = jobs("operation", str(operation.id), "--stop", "--reason", "down again", "--actor", "ops")
    assert "cancelled: 0 done" in out and "stopped by ops: down again" in out
    with pytest.raises(CommandError, match="ended already"):
        jobs("operation", str(operation.id), "--stop", "--reason", "again")
    with pytest.raises(CommandError, match="no bulk operation"):
        jobs("operation", "999999999")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["retry", "--reason", "r"], "say which jobs"),
        (["retry", "1", "--code", CODE, "--reason", "r"], "not both"),
        (["retry", "--code", "NEVER", "--reason", "r"], "no job matches"),
        (["retry", "--queue", "nowhere", "--reason", "r"], "no job has queue"),
        (["retry", "--status", "pending", "--reason", "r"], "only failed"),
        (["cancel", "--status", "pending", "--since", "1h", "--reason", "r"], "has not ended"),
        (["retry", "--search", "a" * 400, "--reason", "r"], "at most 300"),
    ],
)
def test_the_command_line_refuses_what_cannot_apply(args: list[str], message: str) -> None:
    failed(1)
    with pytest.raises(CommandError, match=message):
        jobs(*args)
    assert nothing_written()


@pytest.mark.parametrize(
    "args",
    [
        ["retry", "--status", "borked", "--reason", "r"],
        ["retry", "--code", "a b", "--reason", "r"],
        ["retry", "--since", "yesterday", "--reason", "r"],
        ["retry", "--code", CODE, "--pace", "0", "--reason", "r"],
        ["retry", "--code", CODE, "--pace", "99999", "--reason", "r"],
        ["retry", "--code", CODE, "--reason", ""],
    ],
)
def test_the_parser_refuses_a_bad_value(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"argument|invalid"):
        jobs(*args)


def test_over_the_cap_the_dry_run_says_to_narrow_the_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "MAX_OPERATION_JOBS", 2)
    failed(3)
    with pytest.raises(CommandError, match="at most 2 jobs: narrow the filter"):
        jobs("retry", "--code", CODE, "--reason", "r")


def test_a_read_that_takes_too_long_is_cancelled_and_the_callers_timeout_put_back() -> None:
    """What keeps the confirmation page's count and sample bounded in time on any table."""
    from django.db import transaction

    from django_jobs.reads.estimates import within

    def slow() -> list[Job]:
        return list(Job.objects.raw("SELECT id FROM django_jobs_job, pg_sleep(0.5) LIMIT 1"))

    JobFactory()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '7s'")
        assert within("default", 50, slow) is None
        assert within("default", 5000, slow) is not None
        cursor.execute("SELECT current_setting('statement_timeout')")
        assert cursor.fetchone()[0] == "7s"  # the caller's own, after both
