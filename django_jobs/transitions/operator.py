"""What people do to jobs: cancel, resolve after a review (and retry by hand: ``manual_retry``,
which follows these fences). Each is recorded with its actor and reason.

A retry or a cancel may be fenced by what the operator saw (:class:`Seen`): the job's status
and execution when a bulk operation took it, or when a console page showed it. It then applies
only if both are unchanged, and the event of an operation's change links to it
(``details.operation``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.states import JobStatus

# Always true when nothing was seen; else the job is as it was seen.
_FENCE = """(%(seen_status)s::text IS NULL
         OR (status = %(seen_status)s AND execution_id IS NOT DISTINCT FROM %(seen_execution)s::uuid
             AND (%(seen_retries)s::integer IS NULL OR manual_retries = %(seen_retries)s)))"""
# The event's details: those of the arrow, and the operation it belongs to, if any.
_LINK = """CASE WHEN %(operation)s::bigint IS NULL THEN NULL
              ELSE jsonb_build_object('operation', %(operation)s::bigint) END"""


@dataclass(frozen=True)
class Seen:
    """A job as a bulk operation took it, or a page showed it: an action applies only if it is
    still so. ``operation``: the bulk operation's id, which its events name (None for a page)."""

    status: str
    execution_id: uuid.UUID | None
    operation: int | None = None
    #: The job's manual retries when seen (None: not compared). A job an operator retried and
    #: that was cancelled or failed again before it ran may be back in the status seen, with
    #: no execution, as it was: its count of manual retries has moved.
    manual_retries: int | None = None


def _fenced(params: dict[str, Any], seen: Seen | None) -> dict[str, Any]:
    return {
        **params,
        "seen_status": seen.status if seen else None,
        "seen_execution": seen.execution_id if seen else None,
        "operation": seen.operation if seen else None,
        "seen_retries": seen.manual_retries if seen else None,
    }


# A job not started: pending, or a workflow's step waiting for the jobs before it. The old row is
# locked first so the event can say which state the job left.
_CANCEL_PENDING = f"""
WITH old AS (
    SELECT id, status FROM django_jobs_job
    WHERE id = %(id)s AND status IN ('pending', 'waiting') AND {_FENCE}
    FOR UPDATE
), moved AS (
    UPDATE django_jobs_job j SET status = 'cancelled', cancel_requested_at = now(), finished_at = now()
    FROM old WHERE j.id = old.id AND j.status = old.status
    RETURNING j.id, old.status, j.attempts
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason, details)
    SELECT id, 'cancelled', status, 'cancelled', attempts, %(actor)s, %(reason)s, {_LINK} FROM moved
)
SELECT id FROM moved
"""
# A running job cannot be stopped from outside: its execution learns of the request from its
# heartbeat and ends the job cancelled itself.
_CANCEL_RUNNING = f"""
WITH marked AS (
    UPDATE django_jobs_job SET cancel_requested_at = now()
    WHERE id = %(id)s AND status = 'running' AND cancel_requested_at IS NULL AND {_FENCE}
    RETURNING id, execution_id, worker_id, attempts
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, actor, reason, details)
    SELECT id, 'cancel_requested', 'running', 'running', execution_id, worker_id, attempts,
           %(actor)s, %(reason)s, {_LINK}
    FROM marked
)
SELECT id FROM marked
"""


class CancelResult:
    CANCELLED = "cancelled"  # it was pending (or waiting): cancelled at once
    REQUESTED = "requested"  # it is running: its execution will stop cooperatively
    NOT_CANCELLABLE = "not_cancellable"  # finished, or cancellation already requested


def cancel(
    job_id: int, *, actor: str | None = None, reason: str | None = None, seen: Seen | None = None
) -> str:
    """Cancel a job: a pending or waiting one at once, a running one cooperatively. Returns a
    ``CancelResult`` (``NOT_CANCELLABLE`` too for a job no longer as ``seen``)."""
    params = _fenced({"id": job_id, "actor": actor, "reason": reason}, seen)
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_CANCEL_PENDING, params)
        if cursor.fetchall():
            return CancelResult.CANCELLED
        cursor.execute(_CANCEL_RUNNING, params)
        if cursor.fetchall():
            return CancelResult.REQUESTED
    return CancelResult.NOT_CANCELLABLE


RETRYABLE_BY_OPERATOR = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW)


class ActionRefused(Exception):
    """An operator's action cannot apply to this job (its state changed, or a rule forbids it)."""


_RESOLVE = """
WITH moved AS (
    UPDATE django_jobs_job SET
        status = %(to)s, finished_at = now(),
        completed_at = CASE WHEN %(to)s = 'completed' THEN now() ELSE completed_at END,
        failed_at = CASE WHEN %(to)s = 'failed' THEN now() ELSE failed_at END
    WHERE id = %(id)s AND status = 'needs_review'
    RETURNING id, attempts
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason)
    SELECT id, 'resolved', 'needs_review', %(to)s, attempts, %(actor)s, %(reason)s FROM moved
)
SELECT id FROM moved
"""


def resolve(job_id: int, *, to: str, actor: str, reason: str) -> None:
    """Close a ``needs_review`` job after a human checked it: ``to`` is completed or failed.

    Raises ``ActionRefused`` if the job no longer needs review.
    """
    if to not in (JobStatus.COMPLETED, JobStatus.FAILED):
        raise ValueError("a job under review is resolved as completed or failed")
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RESOLVE, {"id": job_id, "to": str(to), "actor": actor, "reason": reason})
        if cursor.fetchone() is None:
            raise ActionRefused(f"job {job_id} was not resolved: it does not need review")
