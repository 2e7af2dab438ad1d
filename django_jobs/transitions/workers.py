"""Worker processes report themselves alive, for the dashboard; and what is left to do."""

from __future__ import annotations

import json
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

# The job types ride along only until one report carried them (NULL afterwards): a heartbeat
# stays a write of a few integers, and COALESCE keeps what the first report wrote.
_REPORT_WORKER = """
INSERT INTO django_jobs_liveworker
    (worker_id, hostname, pid, queues, concurrency, running, processed, started_at, last_seen_at,
     job_types)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(running)s,
        %(processed)s, now(), now(), %(job_types)s::jsonb)
ON CONFLICT (worker_id) DO UPDATE SET
    running = EXCLUDED.running, processed = EXCLUDED.processed, last_seen_at = now(),
    job_types = COALESCE(EXCLUDED.job_types, django_jobs_liveworker.job_types)
"""


def report_worker(*, job_types: dict[str, int] | None = None, **fields: Any) -> None:
    """Record that a worker process is alive, with what it holds and has done; with
    ``job_types`` (type → newest payload version it reads), also what it can run."""
    params = {**fields, "job_types": None if job_types is None else json.dumps(job_types, sort_keys=True)}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_REPORT_WORKER, params)


def forget_worker(worker_id: str) -> None:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute("DELETE FROM django_jobs_liveworker WHERE worker_id = %s", [worker_id])


def any_active(*, types: list[str], queues: list[str]) -> bool:
    """Whether a job of these types (in these queues; empty: any) is running, or pending in a
    queue that is not paused (a paused queue's jobs wait for a person, not for a worker)."""
    sql = (
        "SELECT 1 FROM django_jobs_job WHERE type = ANY(%s) AND (status = 'running' OR status = 'pending'"
        " AND queue NOT IN (SELECT name FROM django_jobs_queue_state WHERE paused_at IS NOT NULL))"
    )
    params: list[Any] = [types]
    if queues:
        sql += " AND queue = ANY(%s)"
        params.append(queues)
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(sql + " LIMIT 1", params)
        return cursor.fetchone() is not None
