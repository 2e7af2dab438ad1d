"""The arrow out of ``running`` when an execution ends: completed, retried, failed, skipped,
cancelled, parked for review, or released unstarted.

One statement per batch of outcomes, each row guarded by ``(id, execution_id,
status='running')``: the outcome of an execution that lost its lease matches no row and changes
nothing. What to write was decided before (``django_jobs.decision``); this only writes it, with
the event of every arrow off the plain success path in the same statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_jobs.conf import jobs_settings
from django_jobs.states import JobStatus
from django_jobs.transitions.cursor import bound_cursor, seconds
from django_jobs.transitions.guards import STILL_RUNNING


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one execution ended, to be written by :func:`write_outcomes`."""

    job_id: int
    execution_id: uuid.UUID
    status: str  # completed, pending (retry or release), failed, skipped, cancelled, needs_review
    delay: float = 0.0  # seconds before a retry, counted from the database's now()
    error_code: str | None = None
    error: str | None = None
    event: str | None = None  # EventKind; None on the plain success path
    details: str | None = None  # JSON text stored on the event
    #: Executions started, this one included if it counts; None leaves the column as it is.
    attempts: int | None = None
    #: Seconds the handler had been running when it ended, for a job whose start was not
    #: recorded yet (prefetched); None if it never started or its start is recorded.
    ran_for: float | None = None
    reason: str | None = None  # why, on the event (releases)
    #: The handler's return value as JSON text, stored on a completed job; None stores NULL.
    result: str | None = None


# One statement writes any mix of outcomes: the guarded UPDATE moves the rows still owned by
# their execution, and the events of the arrows that need one are inserted from what it moved.
# An outcome that would send the job back to pending is refused when a cancel request arrived
# meanwhile: the caller decides again (cancelled), so that a cancelled job never runs again.
_WRITE_OUTCOMES = f"""
WITH outcome AS (
    SELECT * FROM unnest(%b::bigint[], %b::uuid[], %b::text[], %b::float8[], %b::text[],
                         %b::text[], %b::text[], %b::jsonb[], %b::int[], %b::float8[], %b::text[])
        AS o(id, execution_id, status, delay, error_code, error, event, details, attempts,
             ran_for, reason)
), moved AS (
    UPDATE django_jobs_job j SET
        status = o.status,
        attempts = COALESCE(o.attempts, j.attempts),
        started_at = CASE WHEN j.started_at IS NULL AND o.ran_for IS NOT NULL
                          THEN now() - make_interval(secs => o.ran_for) ELSE j.started_at END,
        available_at = CASE WHEN o.status = 'pending'
                            THEN now() + make_interval(secs => o.delay) ELSE j.available_at END,
        ready = o.status <> 'pending' OR o.delay <= 0,
        completed_at = CASE WHEN o.status = 'completed' THEN now() ELSE j.completed_at END,
        failed_at = CASE WHEN o.status = 'failed' THEN now() ELSE j.failed_at END,
        finished_at = CASE WHEN o.status IN ('pending', 'needs_review') THEN NULL ELSE now() END,
        last_error_code = CASE WHEN o.status = 'completed' OR o.error_code IS NULL
                               THEN j.last_error_code ELSE o.error_code END,
        last_error = CASE WHEN o.status = 'completed' OR o.error_code IS NULL
                          THEN j.last_error ELSE o.error END,
        lease_expires_at = NULL
    FROM outcome o
    WHERE j.id = o.id AND j.execution_id = o.execution_id AND {STILL_RUNNING}
      AND (o.status <> 'pending' OR j.cancel_requested_at IS NULL)
    RETURNING j.id, j.execution_id, j.worker_id, j.attempts, o.status, o.error_code, o.error,
              o.event, o.details, o.reason
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, error_code,
         error, actor, details, reason)
    SELECT id, event, 'running', status, execution_id, worker_id, attempts, error_code, error,
           'worker', details, reason
    FROM moved WHERE event IS NOT NULL
)
SELECT id FROM moved
"""
_CANCEL_REQUESTED = (
    f"SELECT j.id FROM django_jobs_job j WHERE j.id = ANY(%s) AND {STILL_RUNNING}"
    " AND j.cancel_requested_at IS NOT NULL"
)


# The plain success path, by far the most frequent: no error, no event, nothing to choose. A
# statement of its own binds four arrays instead of eleven, which is most of what writing a
# batch of no-op jobs costs the worker. A prefetched execution's attempt and start are counted
# here if no heartbeat recorded them yet (ran_for is then its run time).
_COMPLETE = f"""
UPDATE django_jobs_job j SET
    status = 'completed',
    attempts = j.attempts + (j.started_at IS NULL)::int,
    started_at = COALESCE(j.started_at, now() - make_interval(secs => COALESCE(d.ran_for, 0))),
    completed_at = now(), finished_at = now(), lease_expires_at = NULL, return_value = d.result
FROM unnest(%b::bigint[], %b::uuid[], %b::float8[], %b::jsonb[]) AS d(id, execution_id, ran_for, result)
WHERE j.id = d.id AND j.execution_id = d.execution_id AND {STILL_RUNNING}
RETURNING j.id
"""


def _plain_success(o: Outcome) -> bool:
    return o.status == JobStatus.COMPLETED and o.event is None


def write_outcomes(outcomes: Sequence[Outcome]) -> set[int]:
    """Write finished executions; return the ids of the jobs that were still theirs.

    An id missing from the result belongs to an execution that lost its lease (the job was
    recovered and perhaps already re-run, and this outcome must not overwrite it), or to a
    ``pending`` outcome refused because cancellation was requested (see
    :func:`cancel_requested_among`). Raises ``DataError`` and friends for a value the
    database refuses; the caller then writes the batch one row at a time.
    """
    if not outcomes:
        return set()
    plain = [o for o in outcomes if _plain_success(o)]
    rest = [o for o in outcomes if not _plain_success(o)] if len(plain) < len(outcomes) else []
    alias = jobs_settings.DATABASE
    # Both statements or neither: a batch the database refuses is written again row by row.
    with transaction.atomic(using=alias) if plain and rest else nullcontext():
        return _complete(plain) | _write_others(rest)


def _complete(outcomes: list[Outcome]) -> set[int]:
    if not outcomes:
        return set()
    with bound_cursor(jobs_settings.DATABASE, prepared=True) as cursor:
        cursor.execute(
            _COMPLETE,
            [
                [o.job_id for o in outcomes],
                [o.execution_id for o in outcomes],
                seconds(o.ran_for for o in outcomes),
                [o.result for o in outcomes],
            ],
        )
        return {row[0] for row in cursor.fetchall()}


def _write_others(outcomes: list[Outcome]) -> set[int]:
    if not outcomes:
        return set()
    columns: list[list[Any]] = [[] for _ in range(11)]
    for o in outcomes:
        ran_for = None if o.ran_for is None else float(o.ran_for)  # see cursor.seconds
        for column, value in zip(
            columns,
            (
                o.job_id, o.execution_id, o.status, float(o.delay), o.error_code, o.error, o.event,
                o.details, o.attempts, ran_for, o.reason,
            ),
            strict=True,
        ):  # fmt: skip
            column.append(value)
    with bound_cursor(jobs_settings.DATABASE) as cursor:
        cursor.execute(_WRITE_OUTCOMES, columns)
        return {row[0] for row in cursor.fetchall()}


def cancel_requested_among(job_ids: Sequence[int]) -> set[int]:
    """Of these running jobs, the ones whose cancellation was requested."""
    if not job_ids:
        return set()
    with bound_cursor(jobs_settings.DATABASE) as cursor:
        cursor.execute(_CANCEL_REQUESTED, [list(job_ids)])
        return {row[0] for row in cursor.fetchall()}
