"""The reaper's writes: take back jobs whose lease expired, and prune finished jobs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from django.db import connections, transaction

from django_jobs.conf import jobs_settings
from django_jobs.transitions.calls import marked_calls
from django_jobs.transitions.guards import STILL_RUNNING


@dataclass(frozen=True, slots=True)
class Expired:
    """A running job whose lease expired: its execution is presumed lost."""

    id: int
    type: str
    execution_id: uuid.UUID
    worker_id: str | None
    #: Executions started so far; the lost one is among them if ``started``.
    attempts: int
    max_attempts: int
    #: Whether the lost execution was recorded as started (a prefetched job may not be).
    started: bool
    on_lost: str
    cancel_requested: bool
    queue: str | None = None
    #: The type's policy for an execution lost after marking an external call; None when the
    #: type marks none (see ``Job.on_lost_in_call``).
    on_lost_in_call: str | None = None
    #: The error code of the job's previous ending (the lost execution never wrote one).
    last_error_code: str | None = None
    #: The name of the last external call the lost execution marked, if it marked one (read
    #: only for types that mark their calls).
    marked_call: str | None = None


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the reaper decided for one expired execution."""

    expired: Expired
    status: str  # pending, failed, cancelled or needs_review
    event: str
    attempts: int  # the job's attempts after the recovery
    error_code: str
    delay: float = 0.0
    reason: str = ""


_SELECT_EXPIRED = """
SELECT id, type, execution_id, worker_id, attempts, max_attempts, started_at IS NOT NULL, on_lost,
       cancel_requested_at IS NOT NULL, queue, on_lost_in_call, last_error_code
FROM django_jobs_job
WHERE status = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at LIMIT %s
FOR UPDATE SKIP LOCKED
"""
# The same, in one queue only (the self-test recovers its own jobs and no one else's). A
# statement of its own, not an optional condition of the one above: the reaper's plan stays
# the one it always had.
_SELECT_EXPIRED_IN_QUEUE = """
SELECT id, type, execution_id, worker_id, attempts, max_attempts, started_at IS NOT NULL, on_lost,
       cancel_requested_at IS NOT NULL, queue, on_lost_in_call, last_error_code
FROM django_jobs_job
WHERE status = 'running' AND lease_expires_at < now() AND queue = %s
ORDER BY lease_expires_at LIMIT %s
FOR UPDATE SKIP LOCKED
"""
_RECOVER = f"""
WITH decision AS (
    SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::text[], %s::float8[], %s::text[],
                         %s::text[], %s::int[], %s::text[])
        AS d(id, execution_id, worker_id, status, delay, reason, event, attempts, error_code)
), moved AS (
    UPDATE django_jobs_job j SET
        status = d.status,
        attempts = d.attempts,
        available_at = CASE WHEN d.status = 'pending'
                            THEN now() + make_interval(secs => d.delay) ELSE j.available_at END,
        ready = d.status <> 'pending' OR d.delay <= 0,
        failed_at = CASE WHEN d.status = 'failed' THEN now() ELSE j.failed_at END,
        finished_at = CASE WHEN d.status IN ('failed', 'cancelled') THEN now() END,
        last_error_code = d.error_code,
        last_error = d.reason,
        worker_id = NULL, execution_id = NULL, heartbeat_at = NULL, lease_expires_at = NULL
    FROM decision d
    WHERE j.id = d.id AND j.execution_id = d.execution_id AND {STILL_RUNNING}
      AND j.lease_expires_at < now()
    RETURNING j.id, j.attempts, d.status, d.execution_id, d.worker_id, d.reason, d.delay, d.event,
              d.error_code
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, error_code,
         error, actor, details)
    SELECT id, event, 'running', status, execution_id, worker_id, attempts, error_code,
           reason, 'reaper',
           CASE WHEN status = 'pending' THEN jsonb_build_object('retry_in', round(delay::numeric, 3)) END
    FROM moved
)
SELECT id, status FROM moved
"""


def recover_expired(
    decide: Callable[[Expired], Recovery], limit: int, queue: str | None = None
) -> list[Recovery]:
    """Take back up to ``limit`` running jobs whose lease expired (of ``queue`` only, if
    given), as ``decide`` says.

    Locks the expired rows with SKIP LOCKED, so reapers in many processes split the work, and
    moves each one only if it is still the same expired execution. The marks of the lost
    executions are read after their rows are locked, by a statement of its own (a snapshot
    taken after the locks): a mark committed before the lock is seen, and one that comes after
    waits for this transaction and is then refused (see ``calls._MARK``). Returns what was done.
    """
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        if queue is None:
            cursor.execute(_SELECT_EXPIRED, [limit])
        else:
            cursor.execute(_SELECT_EXPIRED_IN_QUEUE, [queue, limit])
        expired = [Expired(*row) for row in cursor.fetchall()]
        marking = [(e.id, e.execution_id) for e in expired if e.on_lost_in_call is not None]
        marks = marked_calls(marking) if marking else {}
        decisions = [decide(dataclasses.replace(e, marked_call=marks.get(e.id))) for e in expired]
        if not decisions:
            return []
        cursor.execute(
            _RECOVER,
            [
                [r.expired.id for r in decisions],
                [r.expired.execution_id for r in decisions],
                [r.expired.worker_id for r in decisions],
                [r.status for r in decisions],
                [r.delay for r in decisions],
                [r.reason for r in decisions],
                [r.event for r in decisions],
                [r.attempts for r in decisions],
                [r.error_code for r in decisions],
            ],
        )
        moved = {row[0] for row in cursor.fetchall()}
    return [r for r in decisions if r.expired.id in moved]


# Events, marks and a durable job's records go with their job (the foreign keys have no ON DELETE
# CASCADE in the database: Django emulates it, and this statement does not go through the ORM).
# Batches keep locks and WAL small. `finished_at >= since` starts a batch where the one before it
# stopped: the entries of the jobs pruned since vacuum last ran sit at the head of
# django_jobs_finished, and a batch that started from the head would step over all of them (15 of
# a batch's 18 ms in the churn soak). A job that finished before `since` but committed after the
# batch read past it (an outcome written in a long transaction) waits for the next pass, which
# starts from the head again. A member of a workflow is never pruned here: its workflow is pruned
# whole (``prune_workflows``).
_PRUNE = """
WITH doomed AS (
    SELECT id FROM django_jobs_job j
    WHERE status = %(status)s AND finished_at < now() - make_interval(secs => %(keep)s)
      AND finished_at >= COALESCE(%(since)s::timestamptz, '-infinity')
      AND j.workflow_id IS NULL
    ORDER BY finished_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), steps AS (
    DELETE FROM django_jobs_workflowstep WHERE job_id IN (SELECT id FROM doomed)
), events AS (
    DELETE FROM django_jobs_jobevent WHERE job_id IN (SELECT id FROM doomed)
), calls AS (
    DELETE FROM django_jobs_externalcall WHERE job_id IN (SELECT id FROM doomed)
), durable_steps AS (
    DELETE FROM django_jobs_jobstep WHERE job_id IN (SELECT id FROM doomed)
), durable_signals AS (
    DELETE FROM django_jobs_jobsignal WHERE job_id IN (SELECT id FROM doomed)
), signal_keys AS (
    DELETE FROM django_jobs_signalkey WHERE job_id IN (SELECT id FROM doomed)
), pruned AS (
    DELETE FROM django_jobs_job WHERE id IN (SELECT id FROM doomed) RETURNING finished_at
)
SELECT count(*), max(finished_at) FROM pruned
"""


class Pruned(NamedTuple):
    """What one batch of retention deleted."""

    deleted: int
    #: The latest ``finished_at`` among them (None if none): where the next batch starts.
    until: dt.datetime | None


def prune(status: str, older_than: float, limit: int, since: dt.datetime | None = None) -> Pruned:
    """Delete up to ``limit`` jobs in ``status`` finished more than ``older_than`` seconds ago,
    and, if ``since`` is given, not before it (the ``until`` of the batch before)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_PRUNE, {"status": status, "keep": older_than, "limit": limit, "since": since})
        count, until = cursor.fetchone()
        return Pruned(int(count), until)


# A key's row only serializes the claims of its key (its running jobs are counted from the job
# table), so deleting it loses nothing: the next claim of the key creates it again. SKIP LOCKED
# leaves alone a row a claim is deciding on.
_FORGET_IDLE_KEYS = """
DELETE FROM django_jobs_concurrencykey WHERE id IN (
    SELECT id FROM django_jobs_concurrencykey
    WHERE django_jobs_running_with_key(type, key) = 0 LIMIT %s FOR UPDATE SKIP LOCKED
)
"""


def forget_idle_keys(limit: int) -> int:
    """Delete up to ``limit`` rows of concurrency keys with no running job."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_FORGET_IDLE_KEYS, [limit])
        return int(cursor.rowcount)
