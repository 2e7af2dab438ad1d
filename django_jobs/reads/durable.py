"""The reads of durable jobs: where a pending one sleeps or waits (for ``explainjob``, the
console and ``django_jobs.testing``), the steps it recorded (for the job's page), and how many
sleep and wait (for the dashboard and the metrics).

The first two reach the job's records through the ``(job, sequence)`` unique index of
``django_jobs_jobstep``; the signal key through the key table's unique ``job`` index. The counts
are ranges of the partial indexes of sleeps and open waits (migration 0029), each stopped at
``django_jobs.reads.queues.COUNT_CAP`` as the queue table's counts are.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.reads import queues
from django_jobs.reads.bounded import bounded_cursor

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
#: The pending jobs asleep, waiting for a signal, and waiting past their timeout, each up to a
#: cap: a range of django_jobs_step_sleep (until) WHERE kind = 'sleep' from now on, and of
#: django_jobs_step_open_wait (until) WHERE ended_at IS NULL AND kind = 'wait' (whole, then up to
#: now), each read in its order and stopped by its LIMIT. ``until IS NOT NULL`` (every wait has
#: its timeout) makes the whole index a range. The job must be pending: a job cancelled while it
#: slept or waited keeps its record as it was. Its status is a probe of the job's primary key per
#: entry, a boolean subquery the planner neither turns into a join (which would be free to hash
#: every pending job of the table first) nor prices as rare (as it would an equality on its
#: result, and then read the range whole to sort it): it takes half of the entries to pass.
#: The entries of jobs no longer pending are read past, not counted: beyond the cap, a count
#: costs what those in its range are (waits of jobs cancelled while they waited stay open until
#: RETENTION removes the jobs), not what the table holds. The overdue waits are read newest
#: first: a cancelled job's wait times out and gathers with the old ones.
COUNTS = """
SELECT
    (SELECT count(*) FROM (
        SELECT FROM django_jobs_jobstep s
        WHERE s.kind = 'sleep' AND s.until > now() AND {pending}
        ORDER BY s.until LIMIT %(cap)s) AS c),
    (SELECT count(*) FROM (
        SELECT FROM django_jobs_jobstep s
        WHERE s.kind = 'wait' AND s.ended_at IS NULL AND s.until IS NOT NULL AND {pending}
        ORDER BY s.until LIMIT %(cap)s) AS c),
    (SELECT count(*) FROM (
        SELECT FROM django_jobs_jobstep s
        WHERE s.kind = 'wait' AND s.ended_at IS NULL AND s.until <= now() AND {pending}
        ORDER BY s.until DESC LIMIT %(cap)s) AS c)
""".format(pending="(SELECT j.status = 'pending' FROM django_jobs_job j WHERE j.id = s.job_id)")


@dataclass(frozen=True, slots=True)
class DurableCounts:
    """How many pending durable jobs sleep and wait for a signal, each counted up to ``cap``: a
    count at the cap means at least that many."""

    sleeping: int
    #: Every open wait, the ``overdue`` ones included.
    waiting: int
    #: Waits past their timeout: their jobs are due, for a worker to take and time the wait out.
    overdue: int
    cap: int

    @property
    def any(self) -> bool:
        """Whether any job sleeps or waits."""
        return bool(self.sleeping or self.waiting)

    @property
    def capped(self) -> bool:
        """Whether a count stopped at the cap: there are at least that many."""
        return max(self.sleeping, self.waiting, self.overdue) >= self.cap


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


def durable_counts() -> DurableCounts:
    """How many pending jobs sleep, wait for a signal and wait past their timeout, each up to
    ``COUNT_CAP`` (read when called), so that the read costs the same on a table of any size
    (and of as many ended records as it holds). A job whose signal came is counted waiting until
    a worker takes the signal, as :func:`suspension` places it."""
    cap = queues.COUNT_CAP
    with bounded_cursor() as cursor:
        cursor.execute(COUNTS, {"cap": cap})
        sleeping, waiting, overdue = cursor.fetchone()
    return DurableCounts(sleeping, waiting, overdue, cap)


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)
