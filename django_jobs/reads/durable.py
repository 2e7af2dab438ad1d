"""The reads of durable jobs: where a pending one sleeps or waits (for ``explainjob``, the
console and ``django_jobs.testing``), and the steps it recorded (for the job's page).

Both reach the job's records through the ``(job, sequence)`` unique index of
``django_jobs_jobstep``; the signal key through the key table's unique ``job`` index.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

#: The open sleep or wait of a pending job (its last), with the job's signal key and the
#: database's time. A job cancelled, failed or parked for review in its sleep keeps the record,
#: but sleeps no longer: a retry makes it due, and its replay sleeps out what is left.
SUSPENSION = """
SELECT s.kind, s.name, s.until, s.created_at, k.key, now()
FROM django_jobs_jobstep s JOIN django_jobs_job j ON j.id = s.job_id AND j.status = 'pending'
LEFT JOIN django_jobs_signalkey k ON k.job_id = s.job_id
WHERE s.job_id = %s AND ((s.kind = 'sleep' AND s.until > now()) OR (s.kind = 'wait' AND s.ended_at IS NULL))
ORDER BY s.sequence DESC LIMIT 1
"""
#: Every record of a job, in order, and whether each was a signal's (and which key it came to).
STEPS = """
SELECT sequence, name, kind, result::text, until, timed_out, created_at, ended_at,
       kind = 'sleep' AND until > now()
FROM django_jobs_jobstep WHERE job_id = %s ORDER BY sequence
"""


@dataclass(frozen=True, slots=True)
class Suspension:
    """Where a durable job is parked: asleep until ``until``, or waiting for ``signal``."""

    kind: str  # sleep or wait
    name: str
    #: A sleep's wake time, a wait's timeout.
    until: dt.datetime
    since: dt.datetime
    #: The key a webhook signals the job by (None when it was given none).
    key: str | None
    now: dt.datetime


@dataclass(frozen=True, slots=True)
class StepRecord:
    sequence: int
    name: str
    kind: str
    result: Any
    until: dt.datetime | None
    timed_out: bool
    created_at: dt.datetime
    ended_at: dt.datetime | None
    asleep: bool

    @property
    def state(self) -> str:
        """done, sleeping, slept, waiting, signalled or timed out, in a word."""
        if self.kind == "step":
            return "done"
        if self.kind == "sleep":
            return "sleeping" if self.asleep else "slept"
        if self.ended_at is None:
            return "waiting"
        return "timed out" if self.timed_out else "signalled"


def suspension(job_id: int, db: str | None = None) -> Suspension | None:
    """Where job ``job_id`` sleeps or waits, or None when it does neither."""
    with connections[db or jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(SUSPENSION, [job_id])
        row = cursor.fetchone()
        return None if row is None else Suspension(*row)


def steps(job_id: int, db: str | None = None) -> list[StepRecord]:
    """What job ``job_id`` recorded, position by position."""
    with connections[db or jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(STEPS, [job_id])
        return [
            StepRecord(seq, name, kind, _json(result), until, timed_out, created, ended, asleep)
            for seq, name, kind, result, until, timed_out, created, ended, asleep in cursor.fetchall()
        ]


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)
