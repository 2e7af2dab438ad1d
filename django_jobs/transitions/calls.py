"""Marks of external calls: an execution records that it is about to call out, then that the
call's block ended. Both writes are guarded by the execution's ownership of its job."""

from __future__ import annotations

import uuid

from django.db import connections

from django_jobs.conf import jobs_settings

# The job row is locked (FOR KEY SHARE) while the mark is inserted, and the reaper locks the
# rows it recovers FOR UPDATE, then reads their marks in a statement of its own: so either the
# reaper skips the job until the mark is committed (and then sees it), or the mark waits for
# the recovery, finds the job no longer owned by this execution and is not written (the
# execution learns that it lost its lease, and must not call). No execution calls out behind
# a recovery that decided it never did. KEY SHARE does not wait for heartbeats.
_MARK = """
WITH owned AS (
    SELECT id, execution_id FROM django_jobs_job
    WHERE id = %(job)s AND execution_id = %(execution)s AND status = 'running'
    FOR KEY SHARE
)
INSERT INTO django_jobs_externalcall (job_id, execution_id, name, started_at)
SELECT id, execution_id, %(name)s, now() FROM owned
RETURNING id
"""
_END = """
UPDATE django_jobs_externalcall c SET ended_at = now(), exception = %(exception)s
FROM django_jobs_job j
WHERE c.id = %(mark)s AND c.ended_at IS NULL
  AND j.id = c.job_id AND j.execution_id = c.execution_id AND j.status = 'running'
RETURNING c.id
"""
# The marks of executions the reaper has locked: the last one of each (its name says why).
_MARKED = """
SELECT DISTINCT ON (job_id) job_id, name FROM django_jobs_externalcall
WHERE (job_id, execution_id) IN (SELECT * FROM unnest(%s::bigint[], %s::uuid[]))
ORDER BY job_id, id DESC
"""


def mark_call(job_id: int, execution_id: uuid.UUID, name: str) -> int | None:
    """Commit a mark that this execution is about to make external call ``name``.

    Returns the mark's id, or None when the execution no longer owns its job (nothing was
    written: it must not make the call).
    """
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_MARK, {"job": job_id, "execution": execution_id, "name": name})
        row = cursor.fetchone()
        return None if row is None else int(row[0])


def end_call(mark_id: int, exception: str | None) -> bool:
    """Record that the block of mark ``mark_id`` exited (``exception``: the import path of what
    left it, if anything did); False when its execution no longer owns the job."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_END, {"mark": mark_id, "exception": exception})
        return cursor.fetchone() is not None


def marked_calls(executions: list[tuple[int, uuid.UUID]]) -> dict[int, str]:
    """``{job_id: name of its last mark}`` for those of these executions that marked a call."""
    if not executions:
        return {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_MARKED, [[job for job, _ in executions], [execution for _, execution in executions]])
        return {job_id: name for job_id, name in cursor.fetchall()}
