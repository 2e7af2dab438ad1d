"""The arrows of a start-by deadline (``enqueue(start_by=…/expires_in=…)``): a job not started by
then ends ``cancelled``, code ``EXPIRED``, without running, whoever finds it first.

- At the start (``expire_at_start``): a worker about to start a claimed job that has a deadline
  asks this compare-and-set first. On ``(id, execution_id, status='running')`` and
  ``start_by <= now()``: the database's clock decides, in the statement that ends the job, so
  a job is either ended here or free to start, never both. The claim itself is untouched: it
  may hand over a job past its deadline, which then ends here instead of running.
- While pending (``expire_pending``): the reaper's pass ends the pending jobs past their
  deadline, in batches, through the partial index ``django_jobs_start_by``, so that they do
  not linger in the backlog until some worker claims them.

Both end the job as an operator's cancel of a pending job does (a workflow counts its member
out by its policy, through the job table's triggers) and record an ``expired`` event. The
attempt of an execution that never ran is not counted: the job keeps the executions that
started before.
"""

from __future__ import annotations

import uuid

from django.db import connections

from django_jobs.conf import jobs_settings

#: The stored error of an expired job: its deadline, in UTC.
_WHY = (
    "'not started by its start-by deadline '"
    " || to_char(start_by AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'"
)

# A claimed job is running with no execution begun: ended unless its deadline is still ahead.
_EXPIRE_AT_START = f"""
WITH moved AS (
    UPDATE django_jobs_job SET
        status = 'cancelled', finished_at = now(), lease_expires_at = NULL,
        attempts = %(attempts)s, last_error_code = 'EXPIRED', last_error = {_WHY}
    WHERE id = %(id)s AND execution_id = %(execution_id)s AND status = 'running'
      AND start_by <= now()
    RETURNING id, execution_id, worker_id, attempts, last_error
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, error_code, error, actor)
    SELECT id, 'expired', 'running', 'cancelled', execution_id, worker_id, attempts, 'EXPIRED',
           last_error, 'worker'
    FROM moved
)
SELECT id FROM moved
"""

# The oldest deadlines first; a row a claim or a debounce holds is left to the next pass (or to
# the worker's start, which checks again).
_EXPIRE_PENDING = f"""
WITH due AS (
    SELECT id FROM django_jobs_job
    WHERE status = 'pending' AND start_by IS NOT NULL AND start_by <= now()
    ORDER BY start_by LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE django_jobs_job j SET
        status = 'cancelled', finished_at = now(), last_error_code = 'EXPIRED', last_error = {_WHY}
    FROM due WHERE j.id = due.id AND j.status = 'pending'
    RETURNING j.id, j.type, j.queue, j.attempts, j.last_error
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, error_code, error, actor)
    SELECT id, 'expired', 'pending', 'cancelled', attempts, 'EXPIRED', last_error, 'reaper' FROM moved
)
SELECT id, type, queue FROM moved
"""


def expire_at_start(job_id: int, execution_id: uuid.UUID, attempts_before: int) -> bool:
    """End the claimed job ``job_id`` if its start-by deadline has passed, by the database's
    clock, and execution ``execution_id`` still owns it; ``attempts_before`` is the number of
    executions that started before this one (its attempt, never run, is not counted). Returns
    whether it ended the job: then the execution must not start."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(
            _EXPIRE_AT_START, {"id": job_id, "execution_id": execution_id, "attempts": attempts_before}
        )
        return cursor.fetchone() is not None


def expire_pending(limit: int) -> list[tuple[int, str, str]]:
    """End up to ``limit`` pending jobs past their start-by deadline; returns (id, type, queue)
    of each."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_EXPIRE_PENDING, {"limit": limit})
        return [(row[0], row[1], row[2]) for row in cursor.fetchall()]
