"""The database's clock: ages and "stale" are measured by it, as the reaper measures them, so
that a web server whose clock drifts never labels a healthy job stale."""

from __future__ import annotations

import datetime as dt

from django.db import connections

from django_jobs.conf import jobs_settings

#: The database's time now (no table read).
NOW = "SELECT now()"


def database_now() -> dt.datetime:
    """The jobs database's ``now()``."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(NOW)
        now: dt.datetime = cursor.fetchone()[0]
    return now
