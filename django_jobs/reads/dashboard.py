"""The dashboard's figures other than the queue table (:mod:`django_jobs.reads.queues`): the last
hour's throughput, retries and processing times, the last day's failures, the SLA of each type,
what retention will prune, and what silent workers still hold. Each is one statement served by an
index; the counts that could grow with the table stop at a cap.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

#: Completed jobs per minute, last hour: django_jobs_finished (status, finished_at).
THROUGHPUT = """
SELECT date_trunc('minute', finished_at) AS minute, count(*) FROM django_jobs_job
WHERE status = 'completed' AND finished_at > now() - interval '1 hour'
GROUP BY minute ORDER BY minute
"""
#: Jobs failed in the last 24 hours and failed still, per error code: django_jobs_problems.
FAILURES = """
SELECT coalesce(last_error_code, 'UNKNOWN'), count(*) FROM django_jobs_job
WHERE status = 'failed' AND finished_at > now() - interval '24 hours'
GROUP BY 1 ORDER BY 2 DESC
"""
#: Retries scheduled in the last hour: django_jobs_event_kind (kind, created_at).
RETRIES = """
SELECT count(*) FROM django_jobs_jobevent
WHERE kind = 'retry_scheduled' AND created_at > now() - interval '1 hour'
"""
#: Executions that ended in the last hour: django_jobs_finished (status, finished_at).
FINISHED_LAST_HOUR = """
SELECT count(*) FROM django_jobs_job
WHERE status IN ('completed', 'failed', 'skipped') AND finished_at > now() - interval '1 hour'
"""
#: Per type, count and p50 / p95 seconds of the last hour's completed jobs: django_jobs_finished,
#: which includes type and started_at, so the table is not read.
DURATIONS = """
SELECT type, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM finished_at - started_at)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM finished_at - started_at))
FROM django_jobs_job
WHERE status = 'completed' AND finished_at > now() - interval '1 hour'
GROUP BY type ORDER BY type
"""
#: Pending jobs of one type due longer than its SLA, and the oldest one's age, up to a cap:
#: pending rows only, through django_jobs_status (or django_jobs_type); the LIMIT bounds the read.
SLA = """
SELECT count(*), EXTRACT(EPOCH FROM now() - min(available_at)) FROM (
    SELECT available_at FROM django_jobs_job
    WHERE type = %s AND status = 'pending' AND available_at < now() - make_interval(secs => %s)
    LIMIT %s
) AS late
"""
#: Running jobs per worker, for the given workers: running rows only, through django_jobs_status
#: or django_jobs_running.
HELD_BY = """
SELECT worker_id, count(*) FROM django_jobs_job
WHERE status = 'running' AND worker_id = ANY(%s) GROUP BY worker_id
"""
#: Jobs of one status finished longer ago than retention keeps them, and the oldest, up to a
#: cap: django_jobs_finished (status, finished_at); when most rows are that old the planner may
#: read the table instead, and stops at the cap.
PRUNABLE = """
SELECT count(*), min(finished_at) FROM (
    SELECT finished_at FROM django_jobs_job
    WHERE status = %s AND finished_at < now() - make_interval(secs => %s)
    LIMIT %s
) AS old
"""


@dataclass(frozen=True)
class Activity:
    """The last hour (and, for failures, the last day) of the job table."""

    throughput: list[tuple[dt.datetime, int]]  # completed per minute
    failures_by_code: list[tuple[str, int]]  # last 24 h, failed still
    retries: int
    finished: int
    durations: list[dict[str, Any]]  # per type: count, p50, p95 seconds


def activity() -> Activity:
    """The dashboard's figures of the last hour, and the last day's failures by code."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(THROUGHPUT)
        throughput = [(minute, count) for minute, count in cursor.fetchall()]
        cursor.execute(FAILURES)
        failures = [(code, count) for code, count in cursor.fetchall()]
        cursor.execute(RETRIES)
        retries = cursor.fetchone()[0]
        cursor.execute(FINISHED_LAST_HOUR)
        finished = cursor.fetchone()[0]
        cursor.execute(DURATIONS)
        durations = [
            {"type": t, "count": n, "p50": _float(p50), "p95": _float(p95)}
            for t, n, p50, p95 in cursor.fetchall()
        ]
    return Activity(throughput, failures, retries, finished, durations)


def late_jobs(type_name: str, sla: float, cap: int) -> tuple[int, float | None]:
    """How many pending jobs of ``type_name`` are due longer than ``sla`` seconds (at most
    ``cap``), and how long the oldest has been due."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(SLA, [type_name, sla, cap])
        late, oldest = cursor.fetchone()
    return late, _float(oldest)


def prunable(status: str, keep: float, cap: int) -> tuple[int, dt.datetime | None]:
    """How many jobs of ``status`` finished more than ``keep`` seconds ago (at most ``cap``),
    and when the oldest finished."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(PRUNABLE, [status, keep, cap])
        count, oldest = cursor.fetchone()
    return count, oldest


def held_by(worker_ids: list[str]) -> dict[str, int]:
    """How many running jobs each of ``worker_ids`` holds by the job table (none: absent)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(HELD_BY, [worker_ids])
        return dict(cursor.fetchall())


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
