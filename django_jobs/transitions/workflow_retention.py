"""Retention of workflows: a workflow is pruned whole, never job by job (``recovery.prune``
leaves their jobs alone), so what a retry resumes or a callback reads is always there."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import connections, transaction

from django_jobs.conf import jobs_settings

# A workflow is pruned whole, once every job of it has ended and is past its own status's
# retention (a status kept for ever keeps its workflows for ever): a job of it retried later
# always finds the jobs it reads and the steps it resumes, and a callback always counts every
# member. Keeps are given by status (NULL: kept for ever; a status not given is kept too).
_WHOLLY_PRUNABLE = """
NOT EXISTS (
    SELECT 1 FROM django_jobs_job m
    LEFT JOIN unnest(%(statuses)s::text[], %(keeps)s::float8[]) AS r(status, keep) ON r.status = m.status
    WHERE m.workflow_id = w.id
      AND (r.keep IS NULL OR m.finished_at IS NULL
           OR m.finished_at >= now() - make_interval(secs => r.keep)))
"""
# The next workflows after ``after`` that look prunable (read without locks).
_PRUNABLE_WORKFLOWS = f"""
SELECT w.id FROM django_jobs_workflow w
WHERE w.id > %(after)s AND w.id <= %(until)s AND {_WHOLLY_PRUNABLE}
ORDER BY w.id LIMIT %(limit)s
"""
# The end of the batch's window: ``span`` workflows on, or none (then it reaches the last).
_WORKFLOWS_UNTIL = (
    "SELECT w.id FROM django_jobs_workflow w WHERE w.id > %(after)s ORDER BY w.id OFFSET %(span)s LIMIT 1"
)
# Their jobs are locked first (an operator's retry of one of them waits, then finds it gone, or
# commits first and keeps the workflow), then the statement that deletes reads them afresh.
_LOCK_WORKFLOW_JOBS = "SELECT id FROM django_jobs_job WHERE workflow_id = ANY(%(workflows)s) FOR UPDATE"
_PRUNE_WORKFLOWS = f"""
WITH doomed AS (
    SELECT w.id FROM django_jobs_workflow w
    WHERE w.id = ANY(%(workflows)s) AND {_WHOLLY_PRUNABLE}
    FOR UPDATE SKIP LOCKED
), jobs AS (
    SELECT id FROM django_jobs_job WHERE workflow_id IN (SELECT id FROM doomed)
), steps AS (
    DELETE FROM django_jobs_workflowstep WHERE workflow_id IN (SELECT id FROM doomed)
), barriers AS (
    DELETE FROM django_jobs_barrier WHERE workflow_id IN (SELECT id FROM doomed)
), events AS (
    DELETE FROM django_jobs_jobevent WHERE job_id IN (SELECT id FROM jobs)
), calls AS (
    DELETE FROM django_jobs_externalcall WHERE job_id IN (SELECT id FROM jobs)
), durable_steps AS (
    DELETE FROM django_jobs_jobstep WHERE job_id IN (SELECT id FROM jobs)
), durable_signals AS (
    DELETE FROM django_jobs_jobsignal WHERE job_id IN (SELECT id FROM jobs)
), signal_keys AS (
    DELETE FROM django_jobs_signalkey WHERE job_id IN (SELECT id FROM jobs)
), pruned AS (
    DELETE FROM django_jobs_job WHERE id IN (SELECT id FROM jobs) RETURNING status
), workflows AS (
    DELETE FROM django_jobs_workflow WHERE id IN (SELECT id FROM doomed) RETURNING id
)
SELECT (SELECT count(*) FROM workflows), status, count(*) FROM pruned GROUP BY status
UNION ALL SELECT (SELECT count(*) FROM workflows), NULL, 0
"""


class PrunedWorkflows(NamedTuple):
    """What one batch of workflow retention deleted."""

    workflows: int
    #: Their jobs, by status.
    jobs: dict[str, int]
    #: Where the next batch starts (a workflow id), None when this one reached the last.
    next_after: int | None


def prune_workflows(retention: dict[str, float | None], after: int, limit: int) -> PrunedWorkflows:
    """Delete, whole, up to ``limit`` workflows among the next ones after id ``after`` whose
    every job has ended and is past its status's ``retention`` (seconds; None keeps a status
    for ever): their jobs with their events and marks, their steps, barriers and row. A batch
    looks at ``10 * limit`` workflows at most, pruned or kept."""
    statuses = sorted(retention)
    keeps = [retention[status] for status in statuses]
    params: dict[str, Any] = {
        "statuses": statuses,
        "keeps": [None if keep is None else float(keep) for keep in keeps],  # one type: float8[]
        "after": after,
        "span": limit * 10,
        "limit": limit,
    }
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_WORKFLOWS_UNTIL, params)
        row = cursor.fetchone()
        until: int | None = row[0] if row else None
        cursor.execute(_PRUNABLE_WORKFLOWS, {**params, "until": until if until is not None else 2**63 - 1})
        candidates = [row[0] for row in cursor.fetchall()]
        next_after = candidates[-1] if len(candidates) == limit else until
        if not candidates:
            return PrunedWorkflows(0, {}, next_after)
        cursor.execute(_LOCK_WORKFLOW_JOBS, {"workflows": candidates})
        cursor.execute(_PRUNE_WORKFLOWS, {**params, "workflows": candidates})
        rows = cursor.fetchall()
    jobs = {status: int(count) for _, status, count in rows if status is not None}
    return PrunedWorkflows(int(rows[0][0]), jobs, next_after)
