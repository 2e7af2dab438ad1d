"""What ``checkjobs`` and the health check read of the job table (see
:mod:`django_jobs.observe.findings`): a few index probes per queue, whatever the size of the
table."""

from __future__ import annotations

from django.db import connections

from django_jobs.conf import jobs_settings

#: The oldest due pending job's age in one queue, in a handful of index probes whatever its
#: backlog (min(available_at) over the queue would read every entry of it). It is the oldest of:
#:
#: - its ready jobs, through django_jobs_ready_queue (queue, type, version, priority DESC,
#:   available_at): a loose index scan walks the queue's distinct (type, version, priority) in
#:   index order (after (t, v, p) comes the same kind's greatest priority below p, else the
#:   first entry after (queue, t, v), a row comparison bounded by queue <= the queue), then
#:   reads the first available_at of each;
#: - its jobs due but not promoted yet (a kind no worker claims stays so), through
#:   django_jobs_later (type, version, available_at): a loose index scan walks the distinct
#:   kinds, then reads each kind's due entries in available_at order up to the queue's first.
#:   It passes the kind's due and unpromoted jobs of other queues, normally none.
#:
#: Every probe is written so that only its index serves it. django_jobs_ready holds the same
#: entries without the queue: a probe of it filtered by queue would pass the other queues'
#: entries, and the planner, blind to how queues and priorities correlate, may take it. So the
#: ready probes order by queue first and compare the queue as ``= ANY(ARRAY[...])`` (an equality
#: the btree still seeks on, but which the planner does not fold into a constant, so the order
#: by queue stays and only django_jobs_ready_queue yields it); the later probes compare it as
#: ``queue || ''``, so that no index on queue (django_jobs_queue, and a sort) is taken instead.
#:
#: One row: NULL when the queue holds no pending job, negative when its oldest is not due yet.
OLDEST_PENDING = """
WITH RECURSIVE ready_level AS (
    (SELECT type, version, priority FROM django_jobs_job
     WHERE status = 'pending' AND ready AND queue = ANY(ARRAY[%(queue)s])
     ORDER BY queue, type, version, priority DESC LIMIT 1)
    UNION ALL
    SELECT next.type, next.version, next.priority FROM ready_level AS r, LATERAL (
        (SELECT type, version, priority FROM django_jobs_job
         WHERE status = 'pending' AND ready AND queue = ANY(ARRAY[%(queue)s])
           AND type = r.type AND version = r.version AND priority < r.priority
         ORDER BY queue, type, version, priority DESC LIMIT 1)
        UNION ALL
        (SELECT type, version, priority FROM django_jobs_job
         WHERE status = 'pending' AND ready
           AND (queue, type, version) > (%(queue)s, r.type, r.version) AND queue <= %(queue)s
         ORDER BY queue, type, version, priority DESC LIMIT 1)
        LIMIT 1
    ) AS next
), later_kind AS (
    (SELECT type, version FROM django_jobs_job
     WHERE status = 'pending' AND NOT ready
     ORDER BY type, version LIMIT 1)
    UNION ALL
    SELECT next.type, next.version FROM later_kind AS l, LATERAL (
        SELECT type, version FROM django_jobs_job
        WHERE status = 'pending' AND NOT ready AND (type, version) > (l.type, l.version)
        ORDER BY type, version LIMIT 1
    ) AS next
)
SELECT EXTRACT(EPOCH FROM now() - least(
    (SELECT min((SELECT available_at FROM django_jobs_job
                 WHERE status = 'pending' AND ready AND queue = ANY(ARRAY[%(queue)s])
                   AND type = r.type AND version = r.version AND priority = r.priority
                 ORDER BY queue, type, version, priority DESC, available_at LIMIT 1))
     FROM ready_level AS r),
    (SELECT min((SELECT available_at FROM django_jobs_job
                 WHERE status = 'pending' AND NOT ready AND queue || '' = %(queue)s
                   AND type = l.type AND version = l.version AND available_at <= now()
                 ORDER BY available_at LIMIT 1))
     FROM later_kind AS l)))
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
