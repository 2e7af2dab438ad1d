"""Act on every job a filter matches: "retry every job that failed with PROVIDER_DOWN since
14:00 in queue payments", from the console, ``manage.py jobs`` or Python.

Two steps, as an operator takes them:

- :func:`matching`: what the action would touch — how many jobs (counted exactly while that is
  quick, else the planner's estimate, and said so) and a sample of them. Nothing is written.
- :func:`retry_matching` / :func:`cancel_matching`: start a ``BulkOperation``. In one
  transaction it records who and why, takes the matching jobs (each with the status and
  execution seen then; at most ``MAX_OPERATION_JOBS``), enqueues the job of type
  ``django_jobs.bulk`` that carries it out (:mod:`django_jobs.console.bulk_runner`) and writes
  the admin's log entry. The jobs are then acted on in batches, at the operation's pace, each
  by the same guarded transition as a retry or cancel of one job, fenced by what was seen: a
  job that changed meanwhile is skipped, not forced.

:func:`stop_operation` stops one: no batch starts after it; the jobs already acted on stay so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.console.actions import actor_name, check_reason, user_of
from django_jobs.console.bulk_runner import RUNNER_TYPE
from django_jobs.console.job_filter import InvalidFilter, JobFilter
from django_jobs.models import BulkAction, BulkOperation, Job
from django_jobs.reads.estimates import bounded_count, bounded_rows, estimated_rows
from django_jobs.states import JobStatus
from django_jobs.transitions import bulk as bulk_writes

if TYPE_CHECKING:
    from django_jobs.console.actions import Actor

#: The most jobs one operation takes. Its list of jobs is written when it starts, in one
#: transaction: a filter that matches more is refused, and is narrowed (by time, queue or
#: code) into several operations.
MAX_OPERATION_JOBS = 100_000
#: Jobs per second, unless the operator says otherwise. A retry re-enqueues work that will
#: call out again (often to the provider that just recovered): slowly by default. A cancel
#: touches nothing outside.
DEFAULT_PACE = {BulkAction.RETRY: 50, BulkAction.CANCEL: 1000}
MAX_PACE = 10_000
#: The jobs shown as a sample of what an action would touch.
SAMPLE_SIZE = 20
#: How long an exact count may take before the page shows the planner's estimate instead, and
#: the sample before the page goes without one: the confirmation answers in about two seconds
#: at worst, whatever the table holds.
COUNT_TIMEOUT_MS = 1000
SAMPLE_TIMEOUT_MS = 1000

#: The jobs each action can act on: those its one-job transition accepts.
ELIGIBLE = {
    BulkAction.RETRY: Q(status__in=[JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW]),
    BulkAction.CANCEL: Q(status__in=[JobStatus.WAITING, JobStatus.PENDING])
    | Q(status=JobStatus.RUNNING, cancel_requested_at__isnull=True),
}
_ELIGIBLE_WORDS = {
    BulkAction.RETRY: "only failed, cancelled or parked (needs_review) jobs can be retried",
    BulkAction.CANCEL: "only waiting, pending or running jobs can be cancelled",
}
_SAMPLE_COLUMNS = (
    "id",
    "type",
    "queue",
    "status",
    "attempts",
    "max_attempts",
    "last_error_code",
    "finished_at",
)


class NothingMatches(InvalidFilter):
    """The filter matches no job the action could act on."""


class TooManyMatches(InvalidFilter):
    """The filter matches more jobs than one operation takes (``MAX_OPERATION_JOBS``)."""


@dataclass(frozen=True)
class Matching:
    """What an action on a filter would touch."""

    action: str
    filter: JobFilter
    #: How many jobs match; exact when ``exact``, else the planner's estimate.
    count: int
    exact: bool
    #: The newest of them (``SAMPLE_SIZE`` at most), with the columns a list shows; None when
    #: reading them took too long (rare matches among millions of rows).
    sample: list[Job] | None

    @property
    def over_cap(self) -> bool:
        return self.count > MAX_OPERATION_JOBS


def matching(action: str, job_filter: JobFilter) -> Matching:
    """How many jobs ``action`` ("retry" or "cancel") would act on, and a sample; reads only.

    Raises ``InvalidFilter`` for a filter no job could meet (an unknown queue or type, a
    status the action cannot act on).
    """
    jobs = eligible(action, job_filter)
    count, exact = _count(jobs)
    sample = bounded_rows(jobs.only(*_SAMPLE_COLUMNS).order_by("-id")[:SAMPLE_SIZE], SAMPLE_TIMEOUT_MS)
    return Matching(action=action, filter=job_filter, count=count, exact=exact, sample=sample)


def eligible(action: str, job_filter: JobFilter) -> QuerySet[Job]:
    """The jobs ``job_filter`` matches that ``action`` can act on."""
    if action not in ELIGIBLE:
        raise InvalidFilter(f"{str(action)[:20]!r} is not an action: give retry or cancel")
    if not isinstance(job_filter, JobFilter):
        raise TypeError(f"give a JobFilter, not {type(job_filter).__name__}")
    status = job_filter.status
    if status is not None and status not in _statuses(action):
        raise InvalidFilter(f"{_ELIGIBLE_WORDS[BulkAction(action)]}: status={status} matches none")
    alias = jobs_settings.DATABASE
    jobs = Job.objects.using(alias)
    for column, value in (("queue", job_filter.queue), ("type", job_filter.type)):
        # One index probe: a typo is named, rather than counted as "no job matches".
        if value is not None and not jobs.filter(**{column: value}).exists():
            raise InvalidFilter(f"no job has {column} {value!r}")
    return jobs.filter(ELIGIBLE[BulkAction(action)] & job_filter.condition())


def retry_matching(
    job_filter: JobFilter, *, reason: str, actor: Actor | None = None, pace: int | None = None
) -> BulkOperation:
    """Retry every failed, cancelled or parked job ``job_filter`` matches, at ``pace`` jobs per
    second (default ``DEFAULT_PACE["retry"]``). Returns the operation, started: its job does
    the work.

    Raises ``ValueError`` for a bad reason, actor or pace, and ``InvalidFilter`` (a
    ``ValueError``) for a filter that matches nothing (``NothingMatches``) or more than
    ``MAX_OPERATION_JOBS`` jobs (``TooManyMatches``); nothing is written then.
    """
    return start(BulkAction.RETRY, job_filter, reason=reason, actor=actor, pace=pace)


def cancel_matching(
    job_filter: JobFilter, *, reason: str, actor: Actor | None = None, pace: int | None = None
) -> BulkOperation:
    """Cancel every waiting, pending or running job ``job_filter`` matches (a running one
    cooperatively, as ``cancel`` does), at ``pace`` jobs per second (default
    ``DEFAULT_PACE["cancel"]``). Returns the operation, started; raises as
    :func:`retry_matching`."""
    return start(BulkAction.CANCEL, job_filter, reason=reason, actor=actor, pace=pace)


def start(
    action: str, job_filter: JobFilter, *, reason: str, actor: Actor | None = None, pace: int | None = None
) -> BulkOperation:
    """Start a bulk operation (see :func:`retry_matching`)."""
    from django_jobs.enqueueing import enqueue

    name = actor_name(actor)
    check_reason(reason)
    pace = _check_pace(action, pace)
    jobs = eligible(action, job_filter)
    alias = jobs_settings.DATABASE
    with consolelog.audited_change(user_of(actor)) as audit:
        operation = BulkOperation.objects.using(alias).create(
            action=action, filter=job_filter.as_dict(), actor=name, reason=reason, pace=pace, total=0
        )
        taken = bulk_writes.take_jobs(operation.id, jobs, MAX_OPERATION_JOBS + 1)
        if taken == 0:
            raise NothingMatches(f"no job matches ({job_filter.describe()}) that can be {_done(action)}")
        if taken > MAX_OPERATION_JOBS:
            raise TooManyMatches(
                f"more than {MAX_OPERATION_JOBS:,} jobs match ({job_filter.describe()}): one operation "
                "takes at most that many; narrow the filter (a time range, a queue, a code) and "
                "act on each part"
            )
        runner = enqueue(RUNNER_TYPE, {"operation": operation.id})
        operation.total, operation.job_id = taken, runner.id
        operation.save(using=alias, update_fields=["total", "job_id"])
        audit.log(
            operation, f"started: {action} of {taken} jobs matching {job_filter.describe()}: {reason}",
            title=f"Started {_operation_named(operation)}",
        )  # fmt: skip
    return operation


def stop_operation(operation_id: int, *, reason: str, actor: Actor | None = None) -> bool:
    """Stop a running operation: the batch under way finishes, no other starts. Returns False
    when it had ended already. Raises ``LookupError`` for an id no operation has."""
    name = actor_name(actor)
    check_reason(reason)
    alias = jobs_settings.DATABASE
    with consolelog.audited_change(user_of(actor)) as audit:
        operation = BulkOperation.objects.using(alias).filter(id=operation_id).first()
        if operation is None:
            raise LookupError(f"no bulk operation has id {operation_id}")
        stopped = bulk_writes.stop(operation_id, actor=name, reason=reason)
        if stopped:
            audit.log(operation, f"stopped: {reason}", title=f"Stopped {_operation_named(operation)}")
    return stopped


def _operation_named(operation: BulkOperation) -> str:
    """The operation as its admin log entries' titles name it: "retry of 3 matching jobs
    (operation #4)"."""
    action = operation.get_action_display().lower()
    return f"{action} of {operation.total} matching jobs (operation #{operation.id})"


def _statuses(action: str) -> set[str]:
    if action == BulkAction.RETRY:
        return {JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW}
    return {JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING}


def _done(action: str) -> str:
    return "retried" if action == BulkAction.RETRY else "cancelled"


def _check_pace(action: str, pace: object) -> int:
    if pace is None:
        return DEFAULT_PACE[BulkAction(action)]
    if isinstance(pace, bool) or not isinstance(pace, int) or not 1 <= pace <= MAX_PACE:
        raise ValueError(f"the pace is jobs per second: a whole number from 1 to {MAX_PACE:,}")
    return pace


def _count(jobs: QuerySet[Job]) -> tuple[int, bool]:
    """How many rows ``jobs`` holds: counted up to just past the cap when that is quick, else
    the planner's estimate (``exact`` False)."""
    estimate = estimated_rows(jobs)
    if estimate > 2 * MAX_OPERATION_JOBS:
        return estimate, False  # far too many for one operation: counting them helps nobody
    counted = bounded_count(jobs, MAX_OPERATION_JOBS + 1, COUNT_TIMEOUT_MS)
    if counted is None:  # counting took too long: say what the planner expects
        return estimate, False
    return counted, True
