"""What ``checkjobs`` and the health check read of the job table (see
:mod:`django_jobs.observe.findings`): a few index probes per queue, whatever the size of the
table."""

from __future__ import annotations

from django.db import connections

from django_jobs.conf import jobs_settings

#: The oldest pending job's age in one queue: a walk down its distinct priorities through the
#: claim index (django_jobs_claim_queue), then the first entry of each priority.
#: min(available_at) over the whole queue would read every index entry of a backlog; this reads
#: one per distinct priority (there are few).
OLDEST_PENDING = """
WITH RECURSIVE p AS (
    SELECT max(priority) AS priority FROM django_jobs_job WHERE status = 'pending' AND queue = %(queue)s
    UNION ALL
    SELECT (SELECT max(priority) FROM django_jobs_job
            WHERE status = 'pending' AND queue = %(queue)s AND priority < p.priority)
    FROM p WHERE p.priority IS NOT NULL
)
SELECT EXTRACT(EPOCH FROM now() - min(
    (SELECT min(available_at) FROM django_jobs_job
     WHERE status = 'pending' AND queue = %(queue)s AND priority = p.priority)))
FROM p WHERE p.priority IS NOT NULL
"""
#: Expired leases (count up to a cap, the oldest's age), oldest first: django_jobs_running.
STALE = """
SELECT count(*), EXTRACT(EPOCH FROM now() - min(lease_expires_at)) FROM (
    SELECT lease_expires_at FROM django_jobs_job
    WHERE status = 'running' AND lease_expires_at < now() LIMIT %s
) AS stale
"""


def oldest_pending_ages(queues: list[str]) -> dict[str, float]:
    """The seconds the oldest pending job of each queue has been due, for the queues whose
    oldest pending job is due (a queue whose jobs all wait for later is left out)."""
    oldest: dict[str, float] = {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        for queue in queues:
            cursor.execute(OLDEST_PENDING, {"queue": queue})
            age = cursor.fetchone()[0]
            if age is not None and float(age) >= 0:
                oldest[queue] = float(age)
    return oldest


def stale_running(cap: int) -> tuple[int, float | None]:
    """How many running jobs lost their lease (at most ``cap``), and how long ago the oldest
    lease expired."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(STALE, [cap])
        count, age = cursor.fetchone()
    return count, None if age is None else float(age)
