"""What an operator does to a durable job (docs/durable-jobs.md): wake a sleeping one now, or
send it a signal by its id. Each is one statement that writes its ``JobEvent`` (``woken``,
``signal_sent``) with the actor and reason, so the event exists exactly when the change happened.

A wake is fenced as a retry or a cancel is (:class:`~django_jobs.transitions.operator.Seen`):
given what a page showed, it applies only if the job is still so. Both lock the job row: a
wake ``FOR NO KEY UPDATE`` (it moves the job), a signal ``FOR SHARE`` (as the app's own
``django_jobs.signal()``), so an execution parking the job waits for them and then finds what
they wrote.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.transitions.durable import SIGNAL_WAKES
from django_jobs.transitions.operator import _FENCE, _LINK, Seen, _fenced

# The job's sleep ends now (its replay goes on past it) and the job is due now. The job's
# execution is kept: an operator's retry of a cancelled sleeper left none, hence IS NOT
# DISTINCT FROM. A job that is due already (that retry made it so) is left due; its sleep ends.
_WAKE = f"""
WITH parked AS (
    SELECT id, execution_id, attempts FROM django_jobs_job
    WHERE id = %(id)s AND status = 'pending' AND {_FENCE}
    FOR NO KEY UPDATE
), asleep AS (
    SELECT s.id, s.name, s.until FROM django_jobs_jobstep s JOIN parked p ON s.job_id = p.id
    WHERE s.kind = 'sleep' AND s.until > now()
    FOR UPDATE OF s
), slept AS (
    UPDATE django_jobs_jobstep s SET until = now() FROM asleep a WHERE s.id = a.id
    RETURNING a.name, a.until
), woken AS (
    UPDATE django_jobs_job j SET available_at = now(), ready = true FROM parked p
    WHERE j.id = p.id AND j.execution_id IS NOT DISTINCT FROM p.execution_id AND j.status = 'pending'
      AND j.available_at > now() AND EXISTS (SELECT 1 FROM slept)
    RETURNING j.queue
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, attempt, actor, reason, details)
    SELECT p.id, 'woken', 'pending', 'pending', p.execution_id, p.attempts, %(actor)s, %(reason)s,
           jsonb_build_object('sleep', s.name, 'until', s.until) || COALESCE({_LINK}, '{{}}'::jsonb)
    FROM parked p, slept s
)
SELECT s.name, s.until, (SELECT count(pg_notify('django_jobs', queue)) FROM woken) FROM slept s
"""

# A signal to the job of this id, as django_jobs.signal() stores one for the job of a key (the
# key it is stored with is the job's, or empty for a job without one): the first of its name
# only; the job woken by the same arrow (SIGNAL_WAKES). A finished job takes none.
_SIGNAL = f"""
WITH target AS (
    SELECT j.id, j.status, j.execution_id, j.attempts FROM django_jobs_job j
    WHERE j.id = %(id)s AND j.status IN ('pending', 'running', 'waiting')
    FOR SHARE
), stored AS (
    INSERT INTO django_jobs_jobsignal (job_id, name, key, data, created_at)
    SELECT t.id, %(name)s, COALESCE((SELECT key FROM django_jobs_signalkey WHERE job_id = t.id), ''),
           %(data)s::jsonb, now()
    FROM target t
    ON CONFLICT (job_id, name) DO NOTHING RETURNING job_id
), {SIGNAL_WAKES}, events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, attempt, actor, reason, details)
    SELECT t.id, 'signal_sent', t.status, t.status, t.execution_id, t.attempts, %(actor)s, %(reason)s,
           jsonb_build_object('signal', %(name)s::text, 'stored', EXISTS (SELECT 1 FROM stored),
                              'woke', EXISTS (SELECT 1 FROM woken))
    FROM target t
)
SELECT t.id, (SELECT count(*) FROM stored), (SELECT count(pg_notify('django_jobs', queue)) FROM woken)
FROM target t
"""


@dataclass(frozen=True, slots=True)
class Woken:
    #: The name of the sleep that ended, and when it was to end.
    sleep: str
    until: dt.datetime
    #: False when the job was due already (its sleep ended all the same).
    made_due: bool


def wake(job_id: int, *, actor: str, reason: str, seen: Seen | None = None) -> Woken | None:
    """End the sleep of pending job ``job_id`` now, and make it due now; None when it does
    not sleep (or is no longer as ``seen``): nothing was written then."""
    params = _fenced({"id": job_id, "actor": actor, "reason": reason}, seen)
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_WAKE, params)
        row = cursor.fetchone()
        return None if row is None else Woken(row[0], row[1], row[2] > 0)


@dataclass(frozen=True, slots=True)
class Signalled:
    #: False when a signal of that name had come already: the first one stands.
    stored: bool
    #: Whether the job was parked waiting for it, and was made due now.
    woken: bool


def signal(job_id: int, name: str, data: str, *, actor: str, reason: str) -> Signalled | None:
    """Send signal ``name`` (``data``: JSON text) to job ``job_id``; None when the job is not
    pending, running or waiting (nothing was written then)."""
    params: dict[str, Any] = {"id": job_id, "name": name, "data": data, "actor": actor, "reason": reason}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_SIGNAL, params)
        row = cursor.fetchone()
        return None if row is None else Signalled(row[1] > 0, row[2] > 0)
