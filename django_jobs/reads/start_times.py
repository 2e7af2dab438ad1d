"""The enqueue and due times of claimed jobs, read for ``job_started``'s receivers
(``runtime.started``): the claim itself does not return them."""

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

