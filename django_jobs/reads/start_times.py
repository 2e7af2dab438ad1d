"""The enqueue and due times of claimed jobs, read for ``job_started``'s receivers, and which of
them have a start-by deadline, read for their start (``runtime.started``): the claim itself does
not return them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.db import connections

from django_jobs.conf import jobs_settings

_TIMES = "SELECT id, created_at, available_at FROM django_jobs_job WHERE id = ANY(%s)"


def start_times(job_ids: Sequence[int]) -> dict[int, tuple[dt.datetime, dt.datetime]]:
    """``{job id: (created_at, available_at)}`` for those of ``job_ids`` that exist."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_TIMES, [list(job_ids)])
        return {job_id: (created, available) for job_id, created, available in cursor.fetchall()}


# By primary key: a batch of ids, whatever the table's size.
_WITH_DEADLINE = "SELECT id FROM django_jobs_job WHERE id = ANY(%s) AND start_by IS NOT NULL"


def with_deadline(job_ids: Sequence[int]) -> set[int]:
    """Those of ``job_ids`` whose job has a start-by deadline."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_WITH_DEADLINE, [list(job_ids)])
        return {row[0] for row in cursor.fetchall()}
