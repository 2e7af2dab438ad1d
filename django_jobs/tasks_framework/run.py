"""Tasks of Django's Tasks framework, run as jobs: one job type per task, and its handler.

A task is registered as the job type named after its module path (``myapp.tasks.send_email``)
whenever ``JobsBackend`` validates it, which Django does as the ``@task`` decorator runs. Its
handler goes through the same executor as any ``@job``: leases, heartbeats, fencing, retries,
deadlines, the reaper. Around the task function it only adds what the framework promises:

- the ``task_started`` and ``task_finished`` signals of every family present, sent robustly —
  a receiver that raises is logged (sanitised) and changes nothing: the outcome is decided by
  what the task did, never by a receiver. ``task_finished`` is sent by the outcome writer once
  the outcome is written and committed (the type's ``on_finished``), with the status written:
  a receiver is never told of an end that a cancel request or a lost lease then overturns, and
  ``get_result()`` inside it reads what it was told;
- a ``TaskContext`` for ``takes_context`` tasks, whose ``job`` is our ``JobContext``;
- the return value normalised as the framework does (tuples become lists), then checked like
  any handler's (plain JSON within ``MAX_RESULT_BYTES``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.db.models import JSONField
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.module_loading import import_string

from django_jobs import signals
from django_jobs.backoff import Backoff
from django_jobs.conf import jobs_settings
from django_jobs.errors import ResultNotJSON
from django_jobs.models import Job, JobEvent
from django_jobs.names import NAME_RE
from django_jobs.registry import JobType, registry
from django_jobs.runtime.context import JobContext
from django_jobs.runtime.executor import call
from django_jobs.states import EventKind, JobStatus
from django_jobs.tasks_framework import api as taskapi
from django_jobs.tasks_framework.results import STATUS, task_result

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
            on_finished=functools.partial(_finished, name, alias, sender),
            task=True,  # no way to say where its effects are: held after a restore
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
    if task.takes_context:
        args = [family.TaskContext(task_result=running, job=ctx), *args]
    value = _normalised(family, call(functools.partial(task.func, *args, **kwargs)))
    # The return value is checked and stored by the executor; task_finished comes once it is.
    return value


def _normalised(family: taskapi.Family, value: Any) -> Any:
    """The return value as the framework stores it (tuples as lists); ResultNotJSON if it can't."""
    try:
        return family.normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise ResultNotJSON(f"return value is not JSON: {exc}") from exc


def read_result(family: taskapi.Family, task: Any, job_id: int, alias: str, attempt: int = 0) -> Any:
    """The ``TaskResult`` of job ``job_id``, read from its row and history (see ``task_result``).

    Raises ``Job.DoesNotExist`` when there is no such job.
    """
    job = read_job(job_id)
    if job is None:
        raise Job.DoesNotExist(f"no job has id {job_id}")
    return result_of(family, task, job, alias, attempt)


def read_job(job_id: int) -> Job | None:
    """Job ``job_id`` with the events that ended its executions since it was last retried by
    an operator (``ended_events``), in one query; None when there is no such job."""
    ended = RawSQL(_ENDED_EVENTS, (list(ENDING_EVENTS),), output_field=JSONField())
    return Job.objects.using(jobs_settings.DATABASE).annotate(ended_events=ended).filter(id=job_id).first()


def result_of(family: taskapi.Family, task: Any, job: Job, alias: str, attempt: int = 0) -> Any:
    """The ``TaskResult`` of ``job``, as read by :func:`read_job`."""
    events = [JobEvent(job_id=job.id, **fields) for fields in getattr(job, "ended_events", None) or []]
    return task_result(family, task, job, events, alias, attempt)


#: The events that ended the job's executions, oldest first, as a JSON list. An operator's
#: retry starts the count of attempts again from 0: the events before it belong to executions
#: whose attempt numbers the new ones reuse, and would stand in for them.
_ENDED_EVENTS = """
SELECT coalesce(jsonb_agg(jsonb_build_object(
           'kind', e.kind, 'attempt', e.attempt, 'worker_id', e.worker_id, 'error', e.error,
           'details', e.details) ORDER BY e.id), '[]'::jsonb)
FROM django_jobs_jobevent e
WHERE e.job_id = django_jobs_job.id AND e.from_status = 'running' AND e.kind = ANY(%s)
  AND e.id > coalesce((SELECT max(r.id) FROM django_jobs_jobevent r
                       WHERE r.job_id = django_jobs_job.id AND r.kind = 'manual_retry'), 0)
"""


def _finished(name: str, alias: str, sender: type, job_id: int, status: str) -> None:
    """Send ``task_finished`` for the execution of task ``name`` whose outcome, ``status``, was
    just written and committed: the result is read after the write, so it is the one recorded.

    Runs on the worker's writer: whatever goes wrong here is logged and stops nothing.
    """
    try:
        _send_finished(name, alias, sender, job_id, status)
    except Exception as exc:  # the outcome is written already: a signal cannot undo it
        logger.warning("task_finished not sent id=%s task=%s: %s", job_id, name, type(exc).__name__)


def _send_finished(name: str, alias: str, sender: type, job_id: int, status: str) -> None:
    task = import_string(name)
    job = read_job(job_id)
    if job is None:  # deleted since (retention, an operator): there is nothing to tell
        return
    family = taskapi.family_of(task)
    result = result_of(family, task, job, alias)
    written = taskapi.status(family, STATUS[JobStatus(status)])
    if result.status != written:  # changed again since the commit (an operator's retry…)
        result = taskapi.replace(result, status=written)
    error = _error_of_the_end(job, status)
    if error is None:
        send("task_finished", sender, result)
        return
    # Django's log receiver (and error trackers) print the exception being handled with the
    # line: the one handled here carries the stored error — its text, sanitised, never the
    # original traceback with whatever secrets its frames held.
    try:
        raise TaskFailed(error)
    except TaskFailed:
        send("task_finished", sender, result)


def _error_of_the_end(job: Job, status: str) -> str | None:
    """The error the execution that just ended recorded, or None (it succeeded, or skipped).

    A completion writes no event: the last ending event belongs to an earlier execution then.
    """
    events = getattr(job, "ended_events", None) or []
    if status == JobStatus.COMPLETED or not events:
        return None
    last = events[-1]
    if not last.get("error") or last.get("kind") == EventKind.SKIPPED:
        return None
    return str(last["error"])


class TaskFailed(Exception):
    """The error a failed execution of a task recorded (sanitised), as ``task_finished``
    receivers find it in ``sys.exc_info()``."""


# ---- signals ----------------------------------------------------------------------------------


def send(name: str, sender: type, result: Any) -> None:
    """Send signal ``name`` of every family; a receiver that raises is logged, never propagated."""
    about = f"id={result.id} task={result.task.module_path}"
    for family in taskapi.FAMILIES:
        signals.send(getattr(family, name), sender, about=about, task_result=result)
