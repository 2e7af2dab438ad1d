"""What a person does to one job — retry it, cancel it, resolve it after a review — whether
from the console, from Python (``django_jobs.retry`` / ``django_jobs.cancel``) or from
``manage.py jobs``. Every way in takes the same path, so every way leaves the same audit:

- the guarded transition of ``transitions.operator`` (it refuses a job whose state no longer
  allows the action), with its ``JobEvent`` saying who and why;
- when the actor is a Django user, an admin ``LogEntry`` too, as the console writes;
- all of it in one transaction of the jobs database (:func:`consolelog.audited_change`): a
  crash between the writes leaves all or none of them, and a refused action writes nothing.
  When the admin's log lives on another database, its entry follows the commit (the event is
  the record of truth; see :mod:`django_jobs.console.audit`).

Given ``seen`` (what a page showed of the job, :mod:`django_jobs.console.seen`), an action
first reads the job again, locked, and is refused unless it is still as shown.
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.console.reasons import MAX_ACTOR_CHARS, MAX_REASON_CHARS, check_text, reason_problem
from django_jobs.console.seen import COLUMNS as SEEN_COLUMNS
from django_jobs.console.seen import Shown, change
from django_jobs.errors import JobNotFound
from django_jobs.models import Job, Workflow
from django_jobs.names import MAX_JOB_ID
from django_jobs.observe import tracing
from django_jobs.states import JobStatus
from django_jobs.transitions import ActionRefused, CancelResult

# With the rules of who and why (MAX_*_CHARS, reason_problem), which callers such as
# ``manage.py jobs`` check before they call.
__all__ = [
    "LIST_COLUMNS", "MAX_ACTOR_CHARS", "MAX_LISTED", "MAX_REASON_CHARS", "actor_name", "cancel",
    "cancel_workflow", "check_reason", "default_actor", "newest_jobs", "reason_problem", "resolve",
    "retry", "user_of",
]  # fmt: skip

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

    #: Who acts: a Django user (their username is recorded, and an admin log entry written),
    #: or a plain name such as ``"billing-cron"``.
    Actor = str | AbstractBaseUser


def retry(job_id: int, *, reason: str, actor: Actor | None = None, seen: Shown | None = None) -> str:
    """Retry a failed, cancelled or parked (``needs_review``) job by hand: it becomes pending
    with a fresh attempt budget (a workflow's step: waiting again while a job it waits for has
    not ended); its history and last error are kept. Returns the status it left.

    ``actor`` defaults to the system user and host of this process (:func:`default_actor`).
    Raises ``ValueError`` for a bad reason or actor, ``JobNotFound`` for an id no job has, and
    ``ActionRefused`` if the job is in another state (or no longer as ``seen``), another
    active job holds its unique key or that of a step the retry would resume (``KeyHeld``), or
    its workflow's rules refuse it (``StepRefused``: it would run against its condition, or
    retention cut its workflow); nothing is written then.
    """
    name = actor_name(actor)
    check_reason(reason)
    with consolelog.audited_change(user_of(actor)) as audit:
        job = _job(job_id, seen, "retried")
        fence = seen.fence() if seen is not None else None
        # Traced: the retry is a span of the operator's request, and the job's next executions
        # are its children (they were the enqueue's).
        with tracing.retry_span(job.queue, job.type, job_id) as span:
            traced = None if span is None else span.context
            left = transitions.manual_retry(
                job_id, actor=name, reason=reason, seen=fence, trace_context=traced
            )
            if span is not None:
                span.wrote([job_id])  # as an enqueue's span says what it wrote
        audit.log(job, f"retried (was {left}): {reason}", title=f"Retried {_named(job)} (was {left})")
    return left


def cancel(job_id: int, *, reason: str, actor: Actor | None = None, seen: Shown | None = None) -> str:
    """Cancel a job: a pending one at once (``CancelResult.CANCELLED``), a running one
    cooperatively (``CancelResult.REQUESTED``: its next heartbeat tells the handler, which ends
    ``cancelled``, or ``completed`` if it finishes first).

    ``actor`` defaults to the system user and host of this process (:func:`default_actor`).
    Raises ``ValueError`` for a bad reason or actor, ``JobNotFound`` for an id no job has, and
    ``ActionRefused`` if the job is finished, its cancellation was already requested or it is
    no longer as ``seen``; nothing is written then.
    """
    name = actor_name(actor)
    check_reason(reason)
    with consolelog.audited_change(user_of(actor)) as audit:
        job = _job(job_id, seen, "cancelled")
        fence = seen.fence() if seen is not None else None
        result = transitions.cancel(job_id, actor=name, reason=reason, seen=fence)
        if result == CancelResult.NOT_CANCELLABLE:
            raise ActionRefused(_not_cancellable(job))
        if result == CancelResult.CANCELLED:
            done, title = "cancelled", f"Cancelled {_named(job)}"
        else:
            done, title = "cancellation requested", f"Asked {_named(job)} to stop (cancellation requested)"
        audit.log(job, f"{done}: {reason}", title=title)
    return result


def cancel_workflow(workflow_id: int, *, reason: str, actor: Actor | None = None) -> tuple[int, int]:
    """Cancel a workflow: every job of it not started (pending or waiting) is cancelled at once,
    and the cancellation of every running one is requested. Returns (cancelled, requested).

    A job it cancelled is not resumed by a later retry of another job (only the steps the
    workflow itself stopped are). Raises ``ValueError`` for a bad reason or actor, and
    ``LookupError`` for an id no workflow has; nothing is written then.
    """
    name = actor_name(actor)
    check_reason(reason)
    if (
        isinstance(workflow_id, bool)
        or not isinstance(workflow_id, int)
        or not 1 <= workflow_id <= MAX_JOB_ID
    ):
        raise ValueError(f"{workflow_id!r} is not a workflow id")
    alias = jobs_settings.DATABASE
    with consolelog.audited_change(user_of(actor)) as audit:
        workflow = Workflow.objects.using(alias).filter(id=workflow_id).first()
        if workflow is None:
            raise LookupError(f"no workflow has id {workflow_id}")
        cancelled, requested = transitions.cancel_workflow(workflow_id, actor=name, reason=reason)
        counts = f"{cancelled} jobs cancelled, {requested} asked to stop"
        audit.log(
            workflow, f"workflow cancelled ({counts}): {reason}",
            title=f"Cancelled {workflow.kind} #{workflow.id} ({counts})",
        )  # fmt: skip
    return cancelled, requested


def resolve(
    job_id: int, *, to: str, reason: str, actor: Actor | None = None, seen: Shown | None = None
) -> None:
    """Close a ``needs_review`` job after a human checked it: ``to`` is completed (its effect
    happened) or failed (it did not, and must not).

    Raises ``ValueError`` for a bad ``to``, reason or actor, ``JobNotFound`` for an id no job
    has, and ``ActionRefused`` if the job no longer needs review (or is no longer as ``seen``);
    nothing is written then.
    """
    name = actor_name(actor)
    check_reason(reason)
    with consolelog.audited_change(user_of(actor)) as audit:
        # The row stays locked until the commit: the review cannot be undone in between.
        job = _job(job_id, seen, "resolved")
        transitions.resolve(job_id, to=to, actor=name, reason=reason)
        audit.log(job, f"resolved as {to}: {reason}", title=f"Resolved {_named(job)} as {to}")


def _named(job: Job) -> str:
    """A job as a log entry's title names it: without the status it had before the action."""
    return f"{job.type} #{job.id}"


def default_actor() -> str:
    """Who acts when nobody says: ``user@host`` of this process, as ``jobsqueue`` records."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def actor_name(actor: Actor | None) -> str:
    """The name an action records for ``actor`` (``ValueError`` for one that cannot be)."""
    if actor is None:
        return default_actor()[:MAX_ACTOR_CHARS]
    name = actor if isinstance(actor, str) else actor.get_username()
    check_text(
        "actor", name, MAX_ACTOR_CHARS, empty="say who acts: the actor must be a user or a non-empty string"
    )
    return name


def check_reason(reason: object) -> None:
    """``ValueError`` with the person's wording for a reason that cannot be recorded."""
    problem = reason_problem(reason)
    if problem is not None:
        raise ValueError(problem)


def _job(job_id: int, seen: Shown | None = None, done: str = "changed") -> Job:
    """The job as the log entry names it; ``JobNotFound`` rather than a vague refusal. Given
    ``seen``, the row is locked until the action commits, and ``ActionRefused`` says how it
    differs from what the page showed (the action would be ``done``)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= MAX_JOB_ID:
        raise ValueError(f"{job_id!r} is not a job id: ids run from 1 to {MAX_JOB_ID}")
    if seen is not None and seen.id != job_id:
        raise ValueError(f"what a page showed of job {seen.id} says nothing of job {job_id}")
    job = Job.objects.using(jobs_settings.DATABASE).only("type", "cancel_requested_at", *SEEN_COLUMNS)
    if seen is not None:
        # Between this comparison and the write, nobody else may move the job.
        job = job.select_for_update()
    found = job.filter(id=job_id).first()
    if found is None:
        raise JobNotFound(f"no job has id {job_id} (it never existed, or retention pruned it)")
    changed = change(seen, found) if seen is not None else None
    if changed is not None:
        raise ActionRefused(f"job {job_id} was not {done}: {changed}. Nothing was done; reload the page.")
    return found


def _not_cancellable(job: Job) -> str:
    if job.status == JobStatus.RUNNING:
        return f"job {job.id} was not cancelled: its cancellation was already requested"
    if job.status == JobStatus.NEEDS_REVIEW:
        # Parked because it may have done its effect: only a person who checked can end it.
        return (
            f"job {job.id} was not cancelled: it is parked for review (it may have done its effect); "
            "resolve it as completed or failed once you have checked"
        )
    return f"job {job.id} was not cancelled: it is {job.status}, not waiting, pending or running"


def user_of(actor: Actor | None) -> AbstractBaseUser | None:
    """The Django user who owns the admin log entry, if the actor is one."""
    return None if actor is None or isinstance(actor, str) else actor


#: What ``jobs list`` reads of each job: never the payload, checkpoint or error text.
LIST_COLUMNS = (
    "id", "type", "queue", "status", "attempts", "max_attempts", "last_error_code",
    "available_at", "finished_at", "created_at",
)  # fmt: skip
#: The most jobs one listing returns.
MAX_LISTED = 1000


def newest_jobs(
    *,
    status: str | None = None,
    code: str | None = None,
    job_type: str | None = None,
    queue: str | None = None,
    limit: int = 50,
) -> list[Job]:
    """The newest jobs that match every filter given, at most ``limit``: the last enqueued
    first (by id, which rows draw as they are written; ``created_at`` is the time of that order).

    Served, as the console's list is, by an index that ends in ``-id`` — ``(status, -id)``,
    ``(last_error_code, -id)``, ``(type, -id)`` or ``(queue, -id)``, whichever the planner finds
    most selective, or the primary key without a filter — so it reads about ``limit`` rows of a
    table of millions, never the whole table.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
        raise ValueError(f"the limit must be a whole number from 1 to {MAX_LISTED}")
    filters = {"status": status, "last_error_code": code, "type": job_type, "queue": queue}
    jobs = Job.objects.using(jobs_settings.DATABASE).only(*LIST_COLUMNS)
    jobs = jobs.filter(**{column: value for column, value in filters.items() if value is not None})
    return list(jobs.order_by("-id")[:limit])
