"""Worker processes report themselves alive, for the dashboard."""

from __future__ import annotations

from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

_REPORT_WORKER = """
INSERT INTO django_jobs_liveworker
    (worker_id, hostname, pid, queues, concurrency, running, processed, started_at, last_seen_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(running)s,
        %(processed)s, now(), now())
ON CONFLICT (worker_id) DO UPDATE SET
    running = EXCLUDED.running, processed = EXCLUDED.processed, last_seen_at = now()
"""


def report_worker(**fields: Any) -> None:
    """Record that a worker process is alive, with what it holds and has done."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_REPORT_WORKER, fields)


def forget_worker(worker_id: str) -> None:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute("DELETE FROM django_jobs_liveworker WHERE worker_id = %s", [worker_id])
