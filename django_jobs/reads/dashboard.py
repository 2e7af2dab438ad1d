"""The dashboard's figures other than the queue table (:mod:`django_jobs.reads.queues`) and the
last hour (:mod:`django_jobs.reads.activity`): the SLA of each type, what retention will prune,
and what silent workers still hold. Each is one statement served by an index; the counts that
could grow with the table stop at a cap.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.reads.bounded import bounded_cursor

#: Per type with an SLA, its pending jobs due longer ago than the SLA (up to a cap per kind) and
#: the oldest one's due time, through the claim's indexes of pending jobs, never the type's
#: history: a loose scan walks the type's distinct (version, priority) in django_jobs_ready
#: (type, version, priority DESC, available_at) as checkjobs' OLDEST_PENDING does (after
#: (v, p) comes the same version's greatest priority below p, else the first entry of a greater
#: version), and the distinct versions of its jobs not promoted yet in django_jobs_later (type,
#: version, available_at); the late jobs of each are a range of the index, stopped by its
#: LIMIT. The types and SLAs come as two arrays.
SLA = """
SELECT t.type, late.n, late.oldest
FROM unnest(%(types)s::text[], %(slas)s::float8[]) AS t(type, sla), LATERAL (
    WITH RECURSIVE ready_level AS (
        (SELECT version, priority FROM django_jobs_job
         WHERE status = 'pending' AND ready AND type = t.type
         ORDER BY type, version, priority DESC LIMIT 1)
        UNION ALL
        SELECT next.version, next.priority FROM ready_level AS r, LATERAL (
            (SELECT version, priority FROM django_jobs_job
             WHERE status = 'pending' AND ready AND type = t.type
               AND version = r.version AND priority < r.priority
             ORDER BY type, version, priority DESC LIMIT 1)
            UNION ALL
            (SELECT version, priority FROM django_jobs_job
             WHERE status = 'pending' AND ready AND type = t.type AND version > r.version
             ORDER BY type, version, priority DESC LIMIT 1)
            LIMIT 1
        ) AS next
    ), later_version AS (
        (SELECT version FROM django_jobs_job
         WHERE status = 'pending' AND NOT ready AND type = t.type
         ORDER BY type, version LIMIT 1)
        UNION ALL
        SELECT next.version FROM later_version AS l, LATERAL (
            SELECT version FROM django_jobs_job
            WHERE status = 'pending' AND NOT ready AND type = t.type AND version > l.version
            ORDER BY type, version LIMIT 1
        ) AS next
    ), late AS (
        SELECT due.available_at FROM ready_level AS r, LATERAL (
            SELECT available_at FROM django_jobs_job
            WHERE status = 'pending' AND ready AND type = t.type AND version = r.version
              AND priority = r.priority AND available_at < now() - make_interval(secs => t.sla)
            ORDER BY type, version, priority DESC, available_at LIMIT %(cap)s
        ) AS due
        UNION ALL
        SELECT due.available_at FROM later_version AS l, LATERAL (
            SELECT available_at FROM django_jobs_job
            WHERE status = 'pending' AND NOT ready AND type = t.type AND version = l.version
              AND available_at < now() - make_interval(secs => t.sla)
            ORDER BY type, version, available_at LIMIT %(cap)s
        ) AS due
    )
    SELECT least(count(*), %(cap)s) AS n, EXTRACT(EPOCH FROM now() - min(available_at)) AS oldest
    FROM late
) AS late
"""
#: Running jobs per worker, for the given workers: running rows only, through django_jobs_status
#: or django_jobs_running.
HELD_BY = """
SELECT worker_id, count(*) FROM django_jobs_job
WHERE status = 'running' AND worker_id = ANY(%s) GROUP BY worker_id
"""
#: Per status that retention prunes, its jobs finished longer ago than retention keeps them,
#: oldest first up to a cap, and the oldest: django_jobs_finished (status, finished_at), a range
#: of it per status stopped by its LIMIT. The statuses and their retention come as two arrays.
PRUNABLE = """
SELECT r.status, old.n, old.oldest
FROM unnest(%(statuses)s::text[], %(keeps)s::float8[]) AS r(status, keep), LATERAL (
    SELECT count(*) AS n, min(finished_at) AS oldest FROM (
        SELECT finished_at FROM django_jobs_job
        WHERE status = r.status AND finished_at < now() - make_interval(secs => r.keep)
        ORDER BY status, finished_at LIMIT %(cap)s
    ) AS due
) AS old
"""


def late_jobs(slas: dict[str, float], cap: int) -> dict[str, tuple[int, float | None]]:
    """For each type of ``slas`` (name: seconds), how many pending jobs are due longer than its
    SLA (at most ``cap``), and how long the oldest has been due (None: none is late)."""
    if not slas:
        return {}
    with bounded_cursor() as cursor:
        seconds = [float(sla) for sla in slas.values()]  # one array type, whatever the settings hold
        cursor.execute(SLA, {"types": list(slas), "slas": seconds, "cap": cap})
        return {name: (late, _float(oldest) if late else None) for name, late, oldest in cursor.fetchall()}


def prunable(keep: dict[str, float], cap: int) -> dict[str, tuple[int, dt.datetime | None]]:
    """For each status of ``keep`` (status: seconds retention keeps it), how many jobs finished
    longer ago (at most ``cap``), and when the oldest finished."""
    if not keep:
        return {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        seconds = [float(kept) for kept in keep.values()]  # one array type, whatever the settings hold
        cursor.execute(PRUNABLE, {"statuses": list(keep), "keeps": seconds, "cap": cap})
        return {status: (count, oldest) for status, count, oldest in cursor.fetchall()}


def held_by(worker_ids: list[str]) -> dict[str, int]:
    """How many running jobs each of ``worker_ids`` holds by the job table (none: absent)."""
    if not worker_ids:
        return {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(HELD_BY, [worker_ids])
        return dict(cursor.fetchall())


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
