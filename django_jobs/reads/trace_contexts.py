"""The trace contexts stored with jobs, read for the executions about to run them.

Read after the claim, and only by a worker that traces (``observe.tracing``): the claim itself
does not return the column, so that a worker without tracing reads nothing more per job.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections

from django_jobs.conf import jobs_settings

# jsonb as text: decoded (and checked) by the span maker, one job at a time.
_CONTEXTS = (
    "SELECT id, trace_context::text FROM django_jobs_job WHERE id = ANY(%s) AND trace_context IS NOT NULL"
)


def trace_contexts(job_ids: Sequence[int]) -> dict[int, str]:
    """``{job id: its stored trace context as JSON text}`` for those of ``job_ids`` that have one."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_CONTEXTS, [list(job_ids)])
        return {job_id: text for job_id, text in cursor.fetchall()}
