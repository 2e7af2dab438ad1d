"""Tasks of Django's Tasks framework, run as jobs: one job type per task, and its handler.

A task is registered as the job type named after its module path (``myapp.tasks.send_email``)
whenever ``JobsBackend`` validates it, which Django does as the ``@task`` decorator runs. Its
handler goes through the same executor as any ``@job``: leases, heartbeats, fencing, retries,
deadlines, the reaper. Around the task function it only adds what the framework promises:

- the ``task_started`` and ``task_finished`` signals of every family present, sent robustly —
  a receiver that raises is logged (sanitised) and changes nothing: the outcome is decided by
  what the task did, never by a receiver;
- a ``TaskContext`` for ``takes_context`` tasks, whose ``job`` is our ``JobContext``;
- the return value normalised as the framework does (tuples become lists), then checked like
  any handler's (plain JSON within ``MAX_RESULT_BYTES``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

from django_jobs import signals, taskapi
from django_jobs.backoff import Backoff
from django_jobs.conf import jobs_settings
from django_jobs.context import JobContext, LeaseLost
from django_jobs.decision import Situation, decide, happened_for
from django_jobs.errors import InvalidResult
from django_jobs.executor import call, describe, exception_path
from django_jobs.models import Job, JobEvent
from django_jobs.registry import NAME_RE, JobType, registry
from django_jobs.results import encode_result
from django_jobs.states import EventKind, JobStatus
from django_jobs.taskresults import STATUS, task_result

logger = logging.getLogger("django_jobs.tasks")

#: The events that end an execution (each one left ``running``): a result's attempts and errors.
ENDING_EVENTS = (
    EventKind.RETRY_SCHEDULED,
    EventKind.FAILED,
    EventKind.SKIPPED,
    EventKind.CANCELLED,
    EventKind.RELEASED,
    EventKind.RECOVERED,
    EventKind.NEEDS_REVIEW,
    EventKind.RECONCILED,
)


def register(task: Any, *, alias: str, sender: type, max_attempts: int, backoff: Backoff,
             timeout: float | None) -> None:  # fmt: skip
    """Register ``task`` as the job type named after its module path."""
    name = task.module_path
    if not NAME_RE.match(name):
        raise taskapi.InvalidTask(f"task path {name!r} cannot name a job type (up to 200 of A-Za-z0-9_.:-)")
    registry.register(
        JobType(
            name=name,
            handler=_handler(name, alias, sender),
            max_attempts=max_attempts,
            backoff=backoff,
            timeout=timeout,
        )
    )


def _handler(name: str, alias: str, sender: type) -> Callable[[JobContext, dict[str, Any]], Any]:
    def run_task(ctx: JobContext, payload: dict[str, Any]) -> Any:
        return _run(import_string(name), ctx, payload, alias, sender)

    return run_task


def _run(task: Any, ctx: JobContext, payload: dict[str, Any], alias: str, sender: type) -> Any:
    family = taskapi.family_of(task)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    running = read_result(family, task, ctx.job_id, alias, attempt=ctx.attempt)
    if running.started_at is None:  # prefetched: its start is recorded by the next write
        running = taskapi.replace(running, started_at=timezone.now(), last_attempted_at=timezone.now())
    send("task_started", sender, running)
    failure: BaseException | None = None
    try:
        if task.takes_context:
            args = [family.TaskContext(task_result=running, job=ctx), *args]
        value = _normalised(family, call(functools.partial(task.func, *args, **kwargs)))
        encode_result(value)  # the executor stores it; checked here so the signal tells the truth
    except LeaseLost:
        raise  # the job is someone else's now: nothing to tell
    except BaseException as exc:
        failure = exc
    if failure is not None:
        # Sent outside the except block: a receiver that logs with exc_info (the framework's
        # own does) finds no live traceback to print unsanitised; the result carries a
        # sanitised one.
        path, trace = exception_path(failure), describe(failure)
        error = family.TaskError(exception_class_path=path, traceback=trace)
        outcome = _status_after(failure, ctx)
        send("task_finished", sender, taskapi.replace(
            running,
            status=taskapi.status(family, STATUS[JobStatus(outcome)]),
            finished_at=None if outcome in (JobStatus.PENDING, JobStatus.NEEDS_REVIEW) else timezone.now(),
            errors=[*running.errors, error],
        ))  # fmt: skip
        raise failure
    successful = taskapi.status(family, "SUCCESSFUL")
    finished = taskapi.replace(running, status=successful, finished_at=timezone.now())
    taskapi.set_return_value(finished, value)
    send("task_finished", sender, finished)
    return value


def _normalised(family: taskapi.Family, value: Any) -> Any:
    """The return value as the framework stores it (tuples as lists); InvalidResult if it can't."""
    try:
        return family.normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidResult(f"return value is not JSON: {exc}") from exc


def _status_after(exc: BaseException, ctx: JobContext) -> str:
    """Where the job goes after ``exc``, as the outcome writer will decide it."""
    happened, code, retry_after = happened_for(exc)
    situation = Situation(
        happened, ctx.attempt, ctx.max_attempts, cancel_requested=ctx.cancel_requested(),
        error_code=code, retry_after=retry_after,
    )  # fmt: skip
    return str(decide(situation, Backoff).status)


def read_result(family: taskapi.Family, task: Any, job_id: int, alias: str, attempt: int = 0) -> Any:
    """The ``TaskResult`` of job ``job_id``, read from its row and history (see ``task_result``)."""
    database = jobs_settings.DATABASE
    job = Job.objects.using(database).get(id=job_id)
    events = JobEvent.objects.using(database).filter(
        job_id=job_id, from_status=JobStatus.RUNNING, kind__in=ENDING_EVENTS
    )
    return task_result(family, task, job, events.order_by("id"), alias, attempt)


# ---- signals ----------------------------------------------------------------------------------


def send(name: str, sender: type, result: Any) -> None:
    """Send signal ``name`` of every family; a receiver that raises is logged, never propagated."""
    about = f"id={result.id} task={result.task.module_path}"
    for family in taskapi.FAMILIES:
        signals.send(getattr(family, name), sender, about=about, task_result=result)
