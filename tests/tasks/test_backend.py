"""Django's Tasks framework on django_jobs: enqueue, run, results, signals — on whichever
spelling of the framework this Django has (django.tasks ≥ 6.0, the django_tasks backport)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_jobs import LeaseLost
from django_jobs.errors import EnqueueError, InvalidResult, ResultNotJSON
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.tasks_framework import api as taskapi
from django_jobs.tasks_framework.backend import JobsBackend
from django_jobs.testing import run_jobs, run_one, run_until_settled
from django_jobs.transitions import cancel
from django_jobs.transitions.manual_retry import manual_retry
from testproject.testjobs import tasks
from testproject.testjobs.models import BusinessRow

pytestmark = pytest.mark.django_db(transaction=True)

FAMILY = taskapi.PRIMARY
Status = FAMILY.TaskResultStatus


def test_backend_says_what_it_supports() -> None:
    backend = tasks.add.get_backend()
    assert isinstance(backend, JobsBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_enqueue_in_a_committed_transaction_writes_the_job_with_it() -> None:
    with transaction.atomic():
        BusinessRow.objects.create(key="order:1", job_id=0, execution_id=uuid.uuid4())
        result = tasks.add.enqueue(2, 3)
    assert result.status == Status.READY and result.enqueued_at is not None
    job = Job.objects.get(id=int(result.id))
    assert (job.type, job.status, job.payload) == (
        "testproject.testjobs.tasks.add", JobStatus.PENDING, {"args": [2, 3], "kwargs": {}},
    )  # fmt: skip


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(2, 3)
        raise RuntimeError("the view failed after enqueueing")
    assert not Job.objects.filter(id=int(result.id)).exists()
    with pytest.raises(taskapi.TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def test_a_task_runs_under_the_worker_and_its_result_has_the_return_value() -> None:
    result = tasks.add.enqueue(2, 3)
    run_jobs()
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value == 5
    assert result.is_finished and result.errors == []
    assert len(result.worker_ids) == 1 and result.worker_ids[0]
    assert result.started_at and result.finished_at and result.last_attempted_at
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert Job.objects.get(id=int(result.id)).return_value == 5


def test_using_sets_priority_queue_and_a_datetime_run_after() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.echo.using(priority=-20, queue_name="reports", run_after=later).enqueue(1, x="y")
    job = Job.objects.get(id=int(result.id))
    assert (job.priority, job.queue, job.available_at) == (-20, "reports", later)
    fetched = tasks.echo.get_result(result.id)
    assert (fetched.task.priority, fetched.task.queue_name, fetched.status) == (-20, "reports", Status.READY)
    assert (fetched.args, fetched.kwargs) == ([1], {"x": "y"})


def test_run_after_accepts_a_timedelta_counted_from_the_database_clock() -> None:
    result = tasks.add.using(run_after=dt.timedelta(minutes=10)).enqueue(1, 1)  # type: ignore[arg-type]
    job = Job.objects.get(id=int(result.id))
    assert dt.timedelta(minutes=9) < job.available_at - job.created_at <= dt.timedelta(minutes=10, seconds=1)
    run_jobs()
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING  # not due yet


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: tasks.add.using(queue_name="nowhere"), "Queue 'nowhere' is not valid"),
        (lambda: tasks.add.using(run_after=dt.datetime(2030, 1, 1)), "aware"),
        (lambda: tasks.add.using(run_after=dt.timedelta(seconds=-1)), "timedelta >= 0"),  # type: ignore[arg-type]
        (lambda: tasks.add.using(priority=500), "priority"),
    ],
)
def test_invalid_options_raise_a_clear_error_of_both_families(make: Any, message: str) -> None:
    with pytest.raises(taskapi.InvalidTask, match=message) as raised:
        make().enqueue(1, 2)
    for family in taskapi.FAMILIES:
        assert isinstance(raised.value, family.InvalidTask)
    assert isinstance(raised.value, EnqueueError)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((object(),), {}, "must be JSON"),
        ((float("nan"),), {}, "not valid JSON"),
        ((), {"when": dt.date(2030, 1, 1)}, "must be JSON"),
        (({1: "int key"},), {}, "non-string key"),
    ],
)
def test_arguments_that_are_not_json_raise_a_type_error_and_write_nothing(
    args: Any, kwargs: Any, message: str
) -> None:
    # The framework's own backends raise TypeError here: code written for them must catch ours.
    with pytest.raises(TypeError, match=message) as raised:
        tasks.returns.enqueue(*args, **kwargs)
    assert isinstance(raised.value, taskapi.InvalidTask) and isinstance(raised.value, EnqueueError)
    assert all(isinstance(raised.value, family.InvalidTask) for family in taskapi.FAMILIES)
    assert not Job.objects.exists()


def test_arguments_over_the_size_limit_raise_invalid_task_and_write_nothing() -> None:
    with pytest.raises(taskapi.InvalidTask, match="over the limit"):
        tasks.returns.enqueue("x" * 300_000)
    assert not Job.objects.exists()


def test_a_task_that_fails_twice_then_succeeds_has_two_errors_and_three_worker_ids() -> None:
    result = tasks.fails_then_succeeds.enqueue(2)
    run_one()  # one execution: a burst worker may still be running when the retry comes due
    result.refresh()
    assert result.status == Status.READY and len(result.errors) == result.attempts == 1
    run_until_settled()
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value == 3
    assert len(result.errors) == 2 and len(result.worker_ids) == 3 and result.attempts == 3
    first = result.errors[0]
    assert first.exception_class is RuntimeError and first.exception_class_path == "builtins.RuntimeError"
    assert "attempt 1 fails" in first.traceback and "Traceback" in first.traceback
    assert "sk-live-123456789" not in first.traceback  # sanitised like every stored error


def test_statuses_map_to_the_frameworks() -> None:
    failed = tasks.gives_up.enqueue()
    exhausted = tasks.retries_until_exhausted.enqueue()
    skipped = tasks.not_applicable.enqueue()
    cancelled = tasks.add.enqueue(1, 2)
    cancel(int(cancelled.id), actor="ops", reason="not needed")
    run_until_settled()
    backend = tasks.add.get_backend()
    by = {name: backend.get_result(r.id) for name, r in [
        ("failed", failed), ("exhausted", exhausted), ("skipped", skipped), ("cancelled", cancelled)
    ]}  # fmt: skip
    assert by["failed"].status == Status.FAILED and len(by["failed"].errors) == 1
    assert by["failed"].errors[0].exception_class_path == "django_jobs.PermanentError"
    assert by["exhausted"].status == Status.FAILED
    assert len(by["exhausted"].errors) == 3 == by["exhausted"].attempts
    assert by["skipped"].status == Status.SUCCESSFUL and by["skipped"].return_value is None
    assert by["skipped"].errors == []
    assert by["cancelled"].status == Status.FAILED and by["cancelled"].attempts == 0
    with pytest.raises(ValueError, match="failed"):
        by["failed"].return_value  # noqa: B018


def test_a_running_task_is_running_and_a_parked_one_is_not_finished() -> None:
    result = tasks.add.enqueue(1, 2)
    Job.objects.filter(id=int(result.id)).update(status=JobStatus.NEEDS_REVIEW)
    assert tasks.add.get_result(result.id).status == Status.RUNNING
    assert not tasks.add.get_result(result.id).is_finished


def test_a_return_value_that_is_not_json_fails_the_task_with_a_clear_code() -> None:
    result = tasks.returns_a_set.enqueue()
    run_jobs()
    job = Job.objects.get(id=int(result.id))
    assert (job.status, job.last_error_code, job.attempts) == (JobStatus.FAILED, "RESULT_INVALID", 1)
    assert "not JSON" in (job.last_error or "")
    result.refresh()
    assert result.status == Status.FAILED
    # The framework's own backends record a TypeError for such a value; the traceback is ours.
    assert result.errors[0].exception_class is TypeError
    assert "ResultNotJSON: return value is not JSON" in result.errors[0].traceback
    assert issubclass(ResultNotJSON, TypeError) and issubclass(ResultNotJSON, InvalidResult)


def test_a_return_value_over_the_limit_fails_the_task(settings: Any) -> None:
    settings.DJANGO_JOBS = {**settings.DJANGO_JOBS, "MAX_RESULT_BYTES": 100}
    small, large = tasks.returns.enqueue("x" * 50), tasks.returns.enqueue("x" * 200)
    run_jobs()
    assert tasks.returns.get_result(small.id).return_value == "x" * 50
    job = Job.objects.get(id=int(large.id))
    assert (job.status, job.last_error_code) == (JobStatus.FAILED, "RESULT_INVALID")
    assert "over MAX_RESULT_BYTES (100)" in (job.last_error or "")


def test_a_tuple_return_value_is_stored_as_a_list_like_the_framework_does() -> None:
    result = tasks.returns.enqueue([1, "two"])
    run_jobs()
    assert tasks.returns.get_result(result.id).return_value == [1, "two"]


def test_an_async_task_runs() -> None:
    result = tasks.async_multiply.enqueue(6, 7)
    run_jobs()
    assert tasks.async_multiply.get_result(result.id).return_value == 42


def test_aenqueue_and_aget_result() -> None:
    async def scenario() -> tuple[Any, Any]:
        enqueued = await tasks.add.aenqueue(20, 22)
        return enqueued, await tasks.add.aget_result(enqueued.id)

    enqueued, fetched = asyncio.run(scenario())
    assert fetched.id == enqueued.id and fetched.status == Status.READY
    run_jobs()
    assert tasks.add.get_result(enqueued.id).return_value == 42


def test_a_context_task_reaches_the_jobs_own_context() -> None:
    result = tasks.uses_job_context.enqueue(7)
    run_jobs()
    value = tasks.uses_job_context.get_result(result.id).return_value
    assert value == {"key": f"testproject.testjobs.tasks.uses_job_context:job-{result.id}:charge",
                     "attempt": 1, "job_attempt": 1}  # fmt: skip
    assert BusinessRow.objects.filter(key="task-order:7").count() == 1


@pytest.mark.parametrize("result_id", ["999999999", "not-a-number", ""])
def test_an_unknown_id_does_not_exist(result_id: str) -> None:
    for family in taskapi.FAMILIES:
        with pytest.raises(family.TaskResultDoesNotExist):
            tasks.add.get_result(result_id)


def test_a_job_is_not_a_task_result() -> None:
    from django_jobs import enqueue

    job = enqueue("test.noop", {})
    with pytest.raises(taskapi.TaskResultDoesNotExist, match="not a task"):
        tasks.add.get_backend().get_result(str(job.id))


# ---- signals ----------------------------------------------------------------------------------


@pytest.fixture
def raising_receivers() -> Iterator[list[tuple[str, Any]]]:
    """Receivers on every signal of every family: they record what they saw, then raise."""
    seen: list[tuple[str, Any]] = []
    connected = []
    for family in taskapi.FAMILIES:
        for name in ("task_enqueued", "task_started", "task_finished"):

            def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
                seen.append((_name, task_result.status))
                raise RuntimeError("receiver broke (password=hunter2)")

            getattr(family, name).connect(receiver, weak=False)
            connected.append((getattr(family, name), receiver))
    yield seen
    for signal, receiver in connected:
        signal.disconnect(receiver)


def test_a_raising_receiver_is_logged_and_leaves_a_successful_task_successful(
    raising_receivers: list[tuple[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="django_jobs.tasks"):
        result = tasks.add.enqueue(1, 1)
        run_jobs()
    assert tasks.add.get_result(result.id).status == Status.SUCCESSFUL
    assert Job.objects.get(id=int(result.id)).last_error is None
    families = len(taskapi.FAMILIES)
    assert raising_receivers == (
        [("task_enqueued", Status.READY)] * families
        + [("task_started", Status.RUNNING)] * families
        + [("task_finished", Status.SUCCESSFUL)] * families
    )
    assert "receiver broke" in caplog.text and "hunter2" not in caplog.text


def test_task_finished_tells_the_status_the_outcome_records(raising_receivers: list[tuple[str, Any]]) -> None:
    tasks.fails_then_succeeds.enqueue(1)
    run_until_settled()
    finished = [status for name, status in raising_receivers if name == "task_finished"]
    assert finished[:: len(taskapi.FAMILIES)] == [Status.READY, Status.SUCCESSFUL]
    tasks.gives_up.enqueue()
    run_until_settled()
    assert raising_receivers[-1] == ("task_finished", Status.FAILED)


@pytest.fixture
def finished_as_told() -> Iterator[list[tuple[int, Any, Any, str]]]:
    """A ``task_finished`` receiver of the primary family: for each signal, the job, the status
    it told, what ``get_result()`` answers inside the receiver, and the job row's status then."""
    told: list[tuple[int, Any, Any, str]] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        job_id = int(task_result.id)
        read = task_result.task.get_result(task_result.id).status
        told.append((job_id, task_result.status, read, Job.objects.get(id=job_id).status))

    FAMILY.task_finished.connect(receiver, weak=False)
    yield told
    FAMILY.task_finished.disconnect(receiver)


def test_task_finished_comes_after_the_outcome_is_written_and_get_result_agrees(
    finished_as_told: list[tuple[int, Any, Any, str]],
) -> None:
    retried = tasks.fails_then_succeeds.enqueue(1)
    # One execution: until the retry is claimed, nothing else can change what the receiver reads.
    run_one()
    failed, done = tasks.gives_up.enqueue(), tasks.add.enqueue(1, 2)
    run_until_settled()
    by_job: dict[int, list[tuple[Any, Any, str]]] = {}
    for job_id, status, read, row in finished_as_told:
        by_job.setdefault(job_id, []).append((status, read, row))
    assert by_job[int(retried.id)] == [
        (Status.READY, Status.READY, JobStatus.PENDING),
        (Status.SUCCESSFUL, Status.SUCCESSFUL, JobStatus.COMPLETED),
    ]
    assert by_job[int(failed.id)] == [(Status.FAILED, Status.FAILED, JobStatus.FAILED)]
    assert by_job[int(done.id)] == [(Status.SUCCESSFUL, Status.SUCCESSFUL, JobStatus.COMPLETED)]


def test_an_execution_whose_job_was_taken_over_tells_no_task_finished(
    finished_as_told: list[tuple[int, Any, Any, str]],
) -> None:
    result = tasks.taken_over.enqueue()
    run_jobs()
    job = Job.objects.get(id=int(result.id))
    # The zombie's success was not recorded: the job is still the other execution's.
    assert (job.status, job.return_value) == (JobStatus.RUNNING, None)
    assert finished_as_told == []


def test_the_frameworks_failure_log_line_carries_the_sanitised_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=FAMILY.module):
        result = tasks.fails_each_run.enqueue()
        run_jobs()
    assert tasks.fails_each_run.get_result(result.id).status == Status.FAILED
    failures = [r for r in caplog.records if r.name == FAMILY.module and r.levelno == logging.ERROR]
    assert len(failures) == 1 and result.id in failures[0].getMessage()
    logged = caplog.text
    assert "PermanentError: run 1 failed" in logged and "hunter2" not in logged


def test_a_result_after_an_operators_retry_shows_the_new_runs_not_the_old_ones() -> None:
    result = tasks.fails_each_run.enqueue()
    run_jobs()
    result.refresh()
    assert (result.status, result.attempts) == (Status.FAILED, 1)
    assert "run 1 failed" in result.errors[0].traceback
    manual_retry(int(result.id), actor="ops", reason="the account was reopened")
    result.refresh()
    assert (result.status, result.attempts, result.errors) == (Status.READY, 0, [])
    run_jobs()
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (Status.FAILED, 1, 1)
    assert "run 2 failed" in result.errors[0].traceback
    assert result.worker_ids == [Job.objects.get(id=int(result.id)).worker_id]


def test_get_result_and_refresh_read_one_query(django_assert_num_queries: Any) -> None:
    result = tasks.fails_then_succeeds.enqueue(1)
    run_until_settled()
    with django_assert_num_queries(1):
        read = tasks.fails_then_succeeds.get_result(result.id)
    with django_assert_num_queries(1):
        result.refresh()
    assert read.status == result.status == Status.SUCCESSFUL
    assert len(result.errors) == 1 and result.attempts == 2 and result.return_value == 2


# ---- system checks ----------------------------------------------------------------------------


def test_the_backend_check_reports_django_jobs_missing_from_installed_apps(settings: Any) -> None:
    backend = JobsBackend("default", {"BACKEND": "django_jobs.backend.JobsBackend", "OPTIONS": {}})
    assert [m.id for m in backend.check()] == []
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "django_jobs"]
    messages = backend.check()
    assert [m.id for m in messages] == ["django_jobs.E060"]
    assert "django_jobs is not in INSTALLED_APPS" in messages[0].msg and messages[0].is_serious()


def test_a_tasks_error_is_stored_by_its_public_name_and_an_old_module_path_reads_as_it() -> None:
    failed = tasks.gives_up.enqueue()
    run_until_settled()
    event = JobEvent.objects.get(job_id=int(failed.id), kind=EventKind.FAILED)
    assert event.details["exception"] == "django_jobs.PermanentError"

    # As a worker stored it before the package's layout moved: the module is gone, the class is not.
    JobEvent.objects.filter(id=event.id).update(
        details={**event.details, "exception": "django_jobs.context.LeaseLost"}
    )
    error = tasks.gives_up.get_backend().get_result(failed.id).errors[0]
    assert error.exception_class_path == "django_jobs.LeaseLost"
    assert error.exception_class is LeaseLost


def test_a_backend_with_expires_in_gives_each_task_a_start_by_deadline() -> None:
    backend = JobsBackend(
        "expiring", {"BACKEND": "django_jobs.backend.JobsBackend", "OPTIONS": {"EXPIRES_IN": 600}}
    )
    assert backend.problems == [] and backend.expires_in == 600
    result = backend.enqueue(tasks.add, (2, 3), {})
    job = Job.objects.get(id=int(result.id))
    assert job.start_by is not None
    assert dt.timedelta(seconds=599) < job.start_by - job.created_at <= dt.timedelta(seconds=600)
    bad = JobsBackend("bad", {"BACKEND": "django_jobs.backend.JobsBackend", "OPTIONS": {"EXPIRES_IN": 0}})
    assert any("EXPIRES_IN" in problem for problem in bad.problems)
