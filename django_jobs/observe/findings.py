"""What is wrong with the queues right now, as findings with a level: the answer of
``manage.py checkjobs`` and of the health check (``django_jobs.health``).

Three questions, each a few index probes whatever the size of the job table:

- the oldest due job of each queue (``CHECK_OLDEST_DUE_WARNING`` / ``_CRITICAL``): one loose
  index scan lists the queues (``Job.objects.distinct_values``), then, per queue, a probe per
  distinct priority in the claim index (``django_jobs_claim_queue``: queue, priority,
  available_at) finds its oldest pending job;
- a queue with due jobs that no live worker serves (critical): the live-worker rows;
- running jobs whose lease expired and that no reaper took back: a warning, critical once the
  oldest expired more than ``CHECK_STALE_REAPER_INTERVALS`` × ``REAPER_INTERVAL`` ago (no
  reaper is running). Counted up to ``COUNT_CAP`` through the ``django_jobs_running`` index.

Paused queues are left out of the first two: their backlog waits for a person, on purpose.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.models import Job, LiveWorker, Queue, silence_threshold

#: Counting stale running jobs stops here: "N+" is enough to act on.
COUNT_CAP = 10_000


class Level(enum.StrEnum):
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Finding:
    level: Level
    #: Stable code: oldest_due, no_worker, stale_running.
    code: str
    message: str
    queue: str | None = None
    #: The figure behind it: seconds (oldest_due, stale_running's oldest) or a count.
    value: float | None = None

    @property
    def critical(self) -> bool:
        return self.level == Level.CRITICAL

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": str(self.level),
            "code": self.code,
            "queue": self.queue,
            "value": self.value,
            "message": self.message,
        }


# The oldest pending job of one queue: a walk down its distinct priorities through the claim
# index, then the first entry of each priority. min(available_at) over the whole queue would read
# every index entry of a backlog; this reads one per distinct priority (there are few).
_OLDEST_PENDING = """
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
# Expired leases, oldest first, through the django_jobs_running index; capped.
_STALE = """
SELECT count(*), EXTRACT(EPOCH FROM now() - min(lease_expires_at)) FROM (
    SELECT lease_expires_at FROM django_jobs_job
    WHERE status = 'running' AND lease_expires_at < now() LIMIT %s
) AS stale
"""


def find() -> list[Finding]:
    """Every finding now, critical ones first."""
    db = jobs_settings.DATABASE
    findings: list[Finding] = []
    paused = set(Queue.objects.using(db).filter(paused_at__isnull=False).values_list("name", flat=True))
    queues = [q for q in Job.objects.using(db).distinct_values("queue") if q not in paused]
    with connections[db].cursor() as cursor:
        cursor.execute("SELECT now()")
        now: dt.datetime = cursor.fetchone()[0]
        oldest: dict[str, float] = {}
        for queue in queues:
            cursor.execute(_OLDEST_PENDING, {"queue": queue})
            age = cursor.fetchone()[0]
            if age is not None and float(age) >= 0:
                oldest[queue] = float(age)  # its oldest pending job is due: the queue has due jobs
        cursor.execute(_STALE, [COUNT_CAP])
        stale, stale_age = cursor.fetchone()
    live = [w for w in LiveWorker.objects.using(db) if w.is_alive(now)]
    for queue, age in sorted(oldest.items()):
        findings.extend(_backlog(queue, age, live))
    if stale:
        findings.append(_stale(stale, float(stale_age)))
    return sorted(findings, key=lambda f: (not f.critical, f.code, f.queue or ""))


def _backlog(queue: str, age: float, live: list[LiveWorker]) -> list[Finding]:
    findings = []
    if not any(w.serves(queue) for w in live):
        findings.append(
            Finding(
                Level.CRITICAL,
                "no_worker",
                f"queue {queue} has due jobs and no live worker serves it (none reported within "
                f"{silence_threshold():g}s): start one, manage.py runjobs --queue {queue}",
                queue=queue,
                value=round(age, 1),
            )
        )
    if age > jobs_settings.CHECK_OLDEST_DUE_CRITICAL:
        level = Level.CRITICAL
        limit = jobs_settings.CHECK_OLDEST_DUE_CRITICAL
    elif age > jobs_settings.CHECK_OLDEST_DUE_WARNING:
        level = Level.WARNING
        limit = jobs_settings.CHECK_OLDEST_DUE_WARNING
    else:
        return findings
    findings.append(
        Finding(
            level,
            "oldest_due",
            f"queue {queue}: its oldest due job has waited {age:.0f}s (over {limit:g}s); "
            "manage.py explainjob on it says why",
            queue=queue,
            value=round(age, 1),
        )
    )
    return findings


def _stale(count: int, age: float) -> Finding:
    limit = jobs_settings.CHECK_STALE_REAPER_INTERVALS * jobs_settings.REAPER_INTERVAL
    counted = f"{count}+" if count >= COUNT_CAP else str(count)
    if age > limit:
        return Finding(
            Level.CRITICAL,
            "stale_running",
            f"{counted} running job(s) lost their lease, the oldest {age:.0f}s ago (over {limit:g}s): "
            "no reaper is running; run manage.py reapjobs, or a runjobs worker (it reaps too)",
            value=round(age, 1),
        )
    return Finding(
        Level.WARNING,
        "stale_running",
        f"{counted} running job(s) lost their lease, the oldest {age:.0f}s ago: the reaper takes "
        "them back on its next pass",
        value=round(age, 1),
    )
