"""A django-health-check plugin reporting what ``manage.py checkjobs`` reports.

Needs django-health-check 4.x (``pip install 'django-jobs-pg[health]'``): a check is a
dataclass subclass of ``health_check.base.HealthCheck`` with a ``run()`` that raises, listed in
``HealthCheckView.as_view(checks=[...])``. The 3.x API (``BaseHealthCheckBackend`` and
``plugin_dir.register``) is not supported. Critical findings raise ``ServiceUnavailable``: the
endpoint answers 500. Warnings raise ``ServiceWarning`` only with ``warnings_fail=True``, since
django-health-check 4 fails the endpoint on any exception, warnings included.
"""

from __future__ import annotations

import dataclasses

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.observe.findings import find

try:
    from health_check.base import HealthCheck
    from health_check.exceptions import ServiceUnavailable, ServiceWarning
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "django_jobs.health needs django-health-check 4.x: pip install 'django-jobs-pg[health]'"
    ) from exc


@dataclasses.dataclass
class JobsHealthCheck(HealthCheck):  # type: ignore[misc]  # django-health-check ships no types
    """Old backlogs, queues with due jobs that no live worker serves, stale running jobs, what
    holds the vacuum horizon back."""

    #: Fail the endpoint on warnings too (a backlog over CHECK_OLDEST_DUE_WARNING, a few stale
    #: running jobs the reaper has yet to take back, a transaction holding vacuum back).
    warnings_fail: bool = False

    def run(self) -> None:
        connection = connections[jobs_settings.DATABASE]
        try:
            findings = find()
        finally:
            # django-health-check runs a synchronous check on a thread of an executor: close
            # the connection this thread opened rather than leave it to the server's timeout
            # (never one inside a transaction: that one belongs to a caller).
            if not connection.in_atomic_block:
                connection.close()
        critical = [f.message for f in findings if f.critical]
        if critical:
            raise ServiceUnavailable("; ".join(critical))
        warnings = [f.message for f in findings if not f.critical]
        if warnings and self.warnings_fail:
            raise ServiceWarning("; ".join(warnings))
