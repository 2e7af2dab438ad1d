"""The writes of durable jobs (docs/durable-jobs.md): a step, sleep or wait recorded by the
execution that reached it, a signal stored and its job woken, a sleeping job woken by hand.

A record is written on the *handler's* connection, in its transaction when it has one: a
step's record commits with the step's own writes, or neither does. Each insert is guarded by
the execution's ownership of its job, ``(id, execution_id, status='running')``, with the job
row locked ``FOR KEY SHARE`` while it is written (as an external call's mark is): the reaper
locks the rows it recovers, so either it waits for the record and the next execution finds
it, or the record finds the job taken and is not written (the step's writes roll back with
it). ``(job, sequence)`` is unique besides: two executions can never both record a position.

A job that sleeps or waits is ``pending``, due at its wake time or its timeout, its
``execution_id`` that of the execution that parked it: a signal wakes it by a compare-and-set
on ``(id, execution_id, status='pending')``, so a job that ran again since is not moved.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from django_jobs.conf import jobs_settings


@dataclass(frozen=True, slots=True)
class Recorded:
    """One position of a durable job as recorded."""

    sequence: int
    name: str
    kind: str  # step, sleep or wait
    result: str | None  # JSON text
    until: dt.datetime | None
    timed_out: bool
    ended: bool
    #: Seconds from the database's now() to ``until`` (negative when passed); None without one.
    left: float | None


_RECORDED = """
SELECT sequence, name, kind, result::text, until, timed_out, ended_at IS NOT NULL,
       extract(epoch FROM until - now())::float8
FROM django_jobs_jobstep WHERE job_id = %s ORDER BY sequence
"""

_OWNED = (
    "SELECT id FROM django_jobs_job"
    " WHERE id = %(job)s AND execution_id = %(execution)s AND status = 'running'"
)

# A step: its result, recorded as it ends. A sleep: its wake time, from the database's clock.
_RECORD = f"""
WITH owned AS ({_OWNED} FOR KEY SHARE)
INSERT INTO django_jobs_jobstep
    (job_id, sequence, name, kind, result, until, timed_out, execution_id, created_at, ended_at)
SELECT id, %(sequence)s, %(name)s, %(kind)s, %(result)s::jsonb,
       COALESCE(%(until)s::timestamptz, now() + make_interval(secs => %(seconds)s::float8)),
       false, %(execution)s, now(), CASE WHEN %(kind)s = 'step' THEN now() END
FROM owned
RETURNING until, extract(epoch FROM until - now())::float8
"""

_LOCK_OWNED = f"{_OWNED} FOR KEY SHARE"
_SIGNAL_DATA = "SELECT data::text FROM django_jobs_jobsignal WHERE job_id = %s AND name = %s"
_START_WAIT = """
INSERT INTO django_jobs_jobstep
    (job_id, sequence, name, kind, result, until, timed_out, execution_id, created_at, ended_at)
VALUES (%(job)s, %(sequence)s, %(name)s, 'wait', %(data)s::jsonb,
        now() + make_interval(secs => %(timeout)s::float8), false, %(execution)s, now(),
        CASE WHEN %(delivered)s THEN now() END)
RETURNING until, extract(epoch FROM until - now())::float8
"""
# An open wait ends once: with its signal, or, past its timeout, timed out.
_END_WAIT = """
UPDATE django_jobs_jobstep SET result = %(data)s::jsonb, ended_at = now(),
       timed_out = %(data)s IS NULL
WHERE job_id = %(job)s AND sequence = %(sequence)s AND kind = 'wait' AND ended_at IS NULL
  AND (%(data)s IS NOT NULL OR until <= now())
RETURNING until, extract(epoch FROM until - now())::float8
"""
_OPEN_WAIT = """
SELECT until, extract(epoch FROM until - now())::float8 FROM django_jobs_jobstep
WHERE job_id = %s AND sequence = %s AND kind = 'wait'
"""


def recorded(job_id: int) -> list[Recorded]:
    """Every position job ``job_id`` has recorded, in order."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RECORDED, [job_id])
        return [Recorded(*row) for row in cursor.fetchall()]


def record(
    job_id: int,
    execution_id: uuid.UUID,
    sequence: int,
    name: str,
    kind: str,
    *,
    result: str | None = None,
    seconds: float | None = None,
    until: dt.datetime | None = None,
) -> tuple[dt.datetime | None, float | None] | None:
    """Record position ``sequence`` of the job as this execution reached it: a step with its
    ``result`` (JSON text), or a sleep until ``until`` or for ``seconds``. Returns the sleep's
    wake time and the seconds left to it (None, None for a step); None when the execution no
    longer owns the job (nothing was written). Raises ``IntegrityError`` when the position or
    the name is recorded already."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(
            _RECORD,
            {
                "job": job_id, "execution": execution_id, "sequence": sequence, "name": name,
                "kind": kind, "result": result, "seconds": seconds, "until": until,
            },
        )  # fmt: skip
        row = cursor.fetchone()
        if row is None:
            return None
        return (None, None) if kind == "step" else (row[0], row[1])


@dataclass(frozen=True, slots=True)
class Wait:
    """Where a wait stands after :func:`take_signal`."""

    #: The signal's data as JSON text, when one came (``delivered``).
    data: str | None
    delivered: bool
    timed_out: bool
    until: dt.datetime
    #: Seconds from the database's now() to the timeout.
    left: float


def take_signal(
    job_id: int, execution_id: uuid.UUID, sequence: int, name: str, timeout: float, *, started: bool
) -> Wait | None:
    """Take the signal ``name`` for the wait at ``sequence`` if one came, else end the wait as
    timed out if its timeout passed, else start it (``started``: its record exists). All in
    one transaction on the handler's connection. None when the execution no longer owns the
    job (nothing was written)."""
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_LOCK_OWNED, {"job": job_id, "execution": execution_id})
        if cursor.fetchone() is None:
            return None
        cursor.execute(_SIGNAL_DATA, [job_id, name])
        signal = cursor.fetchone()
        data: str | None = None if signal is None else (signal[0] if signal[0] is not None else "null")
        args: dict[str, Any] = {
            "job": job_id,
            "execution": execution_id,
            "sequence": sequence,
            "name": name,
            "data": data,
        }
        if not started:
            cursor.execute(_START_WAIT, {**args, "timeout": timeout, "delivered": data is not None})
            until, left = cursor.fetchone()
            return Wait(data, data is not None, False, until, left)
        cursor.execute(_END_WAIT, args)
        ended = cursor.fetchone()
        if ended is not None:
            return Wait(data, data is not None, data is None, ended[0], ended[1])
        cursor.execute(_OPEN_WAIT, [job_id, sequence])
        until, left = cursor.fetchone()
        return Wait(None, False, False, until, left)


#: The arrow a stored signal wakes its job by, for every way a signal comes (the app's
#: ``signal()``, an operator's): the CTE ``woken``, after ``target`` (the job: id, status,
#: execution_id, locked ``FOR SHARE``) and ``stored`` (the signal, if it was the first of its
#: name). A job parked in a wait for that signal, as the execution that parked it left it, is
#: made due now; any other is left as it is.
SIGNAL_WAKES = """woken AS (
    UPDATE django_jobs_job j SET available_at = now(), ready = true
    FROM target t
    WHERE j.id = t.id AND j.execution_id = t.execution_id AND j.status = 'pending'
      AND t.status = 'pending' AND j.available_at > now()
      AND EXISTS (SELECT 1 FROM stored)
      AND EXISTS (SELECT 1 FROM django_jobs_jobstep w WHERE w.job_id = j.id AND w.kind = 'wait'
                  AND w.name = %(name)s AND w.ended_at IS NULL)
    RETURNING j.id, j.queue
)"""

# A signal: stored for the job its key addresses, the first of its name only, and the job woken
# if it is parked in a wait for that name. The job row is locked FOR SHARE until the caller's
# transaction ends: an execution that is parking the job (its outcome write) waits for it, and
# then finds the signal (wake_if_signalled); or the outcome was first, and the signal finds the
# job pending. Either way a signal sent while the job runs is never missed.
_SIGNAL = f"""
WITH target AS (
    SELECT j.id, j.status, j.execution_id FROM django_jobs_signalkey k
    JOIN django_jobs_job j ON j.id = k.job_id
    WHERE k.key = %(key)s FOR SHARE OF j
), stored AS (
    INSERT INTO django_jobs_jobsignal (job_id, name, key, data, created_at)
    SELECT id, %(name)s, %(key)s, %(data)s::jsonb, now() FROM target
    ON CONFLICT (job_id, name) DO NOTHING RETURNING job_id
), {SIGNAL_WAKES}
SELECT t.id, (SELECT count(*) FROM stored), (SELECT count(pg_notify('django_jobs', queue)) FROM woken)
FROM target t
"""


@dataclass(frozen=True, slots=True)
class Sent:
    job_id: int
    #: False when a signal of that name had come already (the first one stands).
    stored: bool
    #: Whether the job was parked waiting for it, and was made due now.
    woken: bool


def send_signal(key: str, name: str, data: str) -> Sent | None:
    """Store signal ``name`` (``data``: JSON text) for the job of ``key``, in the caller's
    transaction; None when no job has that key (nothing was written)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_SIGNAL, {"key": key, "name": name, "data": data})
        row = cursor.fetchone()
        return None if row is None else Sent(row[0], row[1] > 0, row[2] > 0)


_WAKE_IF_SIGNALLED = """
WITH woken AS (
    UPDATE django_jobs_job j SET available_at = now(), ready = true
    WHERE j.id = %(job)s AND j.execution_id = %(execution)s AND j.status = 'pending'
      AND j.available_at > now()
      AND EXISTS (SELECT 1 FROM django_jobs_jobsignal s WHERE s.job_id = j.id AND s.name = %(name)s)
    RETURNING j.queue
)
SELECT count(pg_notify('django_jobs', queue)) FROM woken
"""


def wake_signalled(parked: list[tuple[int, uuid.UUID, str | None]]) -> int:
    """Of the jobs these executions just parked (``(job id, execution id, signal waited for)``;
    a sleep's signal is None), make due now those whose signal came meanwhile, while the
    execution ran on from its look. Returns how many."""
    woken = 0
    waits = [(job, execution, name) for job, execution, name in parked if name is not None]
    if not waits:
        return 0
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        for job, execution, name in waits:
            cursor.execute(_WAKE_IF_SIGNALLED, {"job": job, "execution": execution, "name": name})
            woken += int(cursor.fetchone()[0])
    return woken


# A sleeping job woken by hand (tests; an operator): the sleep's wake time becomes now, so the
# replay goes on past it, and the job is due now (unless it is already: an operator's retry of a
# sleeping job it cancelled made it due, its sleep still ahead). Guarded by (id, execution_id,
# pending); an operator's retry leaves no execution, hence IS NOT DISTINCT FROM.
_WAKE = """
WITH parked AS (
    SELECT id, execution_id FROM django_jobs_job WHERE id = %(job)s AND status = 'pending'
    FOR NO KEY UPDATE
), slept AS (
    UPDATE django_jobs_jobstep s SET until = now() FROM parked p
    WHERE s.job_id = p.id AND s.kind = 'sleep' AND s.until > now()
    RETURNING s.job_id
), woken AS (
    UPDATE django_jobs_job j SET available_at = now(), ready = true FROM parked p
    WHERE j.id = p.id AND j.execution_id IS NOT DISTINCT FROM p.execution_id AND j.status = 'pending'
      AND j.available_at > now() AND EXISTS (SELECT 1 FROM slept)
    RETURNING j.queue
)
SELECT (SELECT count(*) FROM slept), (SELECT count(pg_notify('django_jobs', queue)) FROM woken)
"""


def wake(job_id: int) -> bool:
    """End the sleep of pending job ``job_id`` now; False when it does not sleep."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_WAKE, {"job": job_id})
        return bool(cursor.fetchone()[0])


_ADDRESS = """
INSERT INTO django_jobs_signalkey (key, job_id, created_at) VALUES (%s, %s, now())
ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key WHERE django_jobs_signalkey.job_id = EXCLUDED.job_id
RETURNING key
"""


def address(job_id: int, key: str) -> bool:
    """Give job ``job_id`` signal key ``key``, in the caller's transaction (True also when it
    has it already); False when another job has the key (nothing was written). Raises
    ``IntegrityError`` when the job has another key."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_ADDRESS, [key, job_id])
        return cursor.fetchone() is not None
