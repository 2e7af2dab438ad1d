"""A task's ``TaskResult``, read from its job row and the job's history.

The status mapping (``docs/django-tasks.md`` explains it to users):

==============  ===========  ===================================================================
ours            Django's     why
==============  ===========  ===================================================================
pending         READY        waiting for its first run, or for a retry after a failed attempt
running         RUNNING
completed       SUCCESSFUL   ``return_value`` is what the task returned
skipped         SUCCESSFUL   the task raised ``SkipJob``: it ended on purpose, not in error;
                             ``return_value`` is None
failed          FAILED       ``errors`` has one entry per failed attempt
cancelled       FAILED       an operator cancelled it: it did not do its work
needs_review    RUNNING      its last execution may or may not have done its effect, and a
                             blind retry is unsafe: not finished until an operator resolves
                             it (to SUCCESSFUL or FAILED) or retries it (READY)
==============  ===========  ===================================================================

``worker_ids`` has one entry per attempt that started (so ``attempts`` counts executions, like
ours), ``errors`` one per attempt that ended in an error, with its sanitised traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_jobs.errors import public_class_path
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.tasks_framework.api import Family, set_return_value, status

STATUS = {
    JobStatus.PENDING: "READY",
    JobStatus.RUNNING: "RUNNING",
    JobStatus.COMPLETED: "SUCCESSFUL",
    JobStatus.SKIPPED: "SUCCESSFUL",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELLED: "FAILED",
    JobStatus.NEEDS_REVIEW: "RUNNING",
}

#: An execution that the reaper took back raised nothing we saw: its error is a lost lease.
_LOST = "django_jobs.LeaseLost"

#: Our errors that stand where the framework's own backends record a builtin one: the task's
#: error names the builtin, as code written for them compares it (``exception_class is
#: TypeError``); the traceback and the job's error code still say which of ours it was.
_AS_THE_FRAMEWORK_RECORDS = {"django_jobs.errors.ResultNotJSON": "builtins.TypeError"}


def task_result(
    family: Family, task: Any, job: Job, events: Iterable[JobEvent], backend: str, attempt: int = 0
) -> Any:
    """The ``TaskResult`` (of ``family``) of the task ``job`` runs.

    ``events`` are the job's events that left ``running`` (each one ended an execution), in
    order. ``attempt`` is the number of the execution running now, when the caller is that
    execution: a job prefetched by its worker has its attempt counted on the row only once the
    heartbeat or the outcome records its start.
    """
    ended = _first_per_attempt(events)
    worker_ids = [
        (ended[n].worker_id if n in ended and ended[n].worker_id else job.worker_id) or ""
        for n in range(1, max(job.attempts, attempt) + 1)
    ]
    errors = [
        family.TaskError(exception_class_path=_exception(event), traceback=event.error)
        for n, event in sorted(ended.items())
        if event.error and event.kind != EventKind.SKIPPED
    ]
    payload = job.payload if isinstance(job.payload, dict) else {}
    result = family.TaskResult(
        task=task,
        id=str(job.id),
        status=status(family, STATUS[JobStatus(job.status)]),
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=errors,
        worker_ids=worker_ids,
    )
    if job.status == JobStatus.COMPLETED:
        set_return_value(result, job.return_value)
    return result


def _first_per_attempt(events: Iterable[JobEvent]) -> dict[int, JobEvent]:
    """The event that ended each counted attempt.

    A job given back unstarted is released with the attempt number of the one before it; the
    first event of a number is the one that ended that attempt.
    """
    ended: dict[int, JobEvent] = {}
    for event in events:
        if event.attempt and event.attempt not in ended:
            ended[event.attempt] = event
    return ended


def _exception(event: JobEvent) -> str:
    details = event.details if isinstance(event.details, dict) else {}
    exception = details.get("exception")
    if isinstance(exception, str):
        # Stored before the public names were, a class of ours may name a module since moved.
        exception = public_class_path(exception)
        return _AS_THE_FRAMEWORK_RECORDS.get(exception, exception)
    return _LOST if event.kind == EventKind.RECOVERED else "builtins.Exception"
