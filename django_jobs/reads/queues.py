"""The per-queue figures: how many jobs wait (for a workflow's earlier jobs, or to be due), are
due, run, are stale, failed or wait for a person, and who paused the queue. The dashboard's
queue table and the metrics view's gauges read the same numbers, from here.

Each statement reads only the rows of the statuses it counts, through an index of them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.registry import registry


@dataclass
class QueueRow:
    queue: str
    #: Workflow steps waiting for the jobs before them.
    waiting: int = 0
    pending: int = 0
    due: int = 0
    running: int = 0
    stale: int = 0
    failed: int = 0
    needs_review: int = 0
    oldest_due_seconds: float | None = None
    #: Set while the queue is paused, with who paused it and why.
    paused_at: dt.datetime | None = None
    paused_by: str | None = None
    pause_reason: str | None = None


#: Pending, due, the oldest due job's age and the waiting workflow steps, per queue: pending
#: and waiting rows only, through the (status, -id) entries of django_jobs_status.
PENDING = """
SELECT queue, count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'pending' AND available_at <= now()),
       EXTRACT(EPOCH FROM now() - min(available_at)
                                  FILTER (WHERE status = 'pending' AND available_at <= now())),
       count(*) FILTER (WHERE status = 'waiting')
FROM django_jobs_job WHERE status IN ('pending', 'waiting') GROUP BY queue
"""
#: Running and expired leases, per queue: running rows only, through django_jobs_running or
#: django_jobs_status.
RUNNING = """
SELECT queue, count(*), count(*) FILTER (WHERE lease_expires_at < now())
FROM django_jobs_job WHERE status = 'running' GROUP BY queue
"""
#: Failed and needs-review jobs, per queue: django_jobs_problems (those two statuses only).
PROBLEMS = """
SELECT queue, status, count(*) FROM django_jobs_job
WHERE status IN ('failed', 'needs_review') GROUP BY queue, status
"""
#: The paused queues, with who and why: the queue table (a row per queue ever paused).
PAUSED = "SELECT name, paused_at, paused_by, reason FROM django_jobs_queue_state WHERE paused_at IS NOT NULL"


def queue_rows() -> list[QueueRow]:
    """The per-queue figures, by queue name: every queue that holds jobs in one of the counted
    states, every queue a registered job type names and every paused one (so that an idle queue
    can be paused ahead of time, and a paused one is seen)."""
    queues: dict[str, QueueRow] = {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(PENDING)
        for name, pending, due, oldest, waiting in cursor.fetchall():
            queues[name] = QueueRow(
                name, waiting=waiting, pending=pending, due=due, oldest_due_seconds=_float(oldest)
            )
        cursor.execute(RUNNING)
        for name, running, stale in cursor.fetchall():
            row = queues.setdefault(name, QueueRow(name))
            row.running, row.stale = running, stale
        cursor.execute(PROBLEMS)
        for name, status, count in cursor.fetchall():
            row = queues.setdefault(name, QueueRow(name))
            setattr(row, status, count)
        for job_type in registry.all():
            queues.setdefault(job_type.default_queue, QueueRow(job_type.default_queue))
        cursor.execute(PAUSED)
        for name, paused_at, paused_by, reason in cursor.fetchall():
            row = queues.setdefault(name, QueueRow(name))
            row.paused_at, row.paused_by, row.pause_reason = paused_at, paused_by, reason
    return sorted(queues.values(), key=lambda q: q.queue)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
