"""The only writer of ``Job.status``. One function per arrow of the state machine.

Every write after a claim is a compare-and-set on ``(id, execution_id, status='running')``: an
execution whose lease was taken over (a zombie) matches no row and changes nothing; callers
learn it from the returned ids. Each arrow off the plain claim → complete path inserts its
``JobEvent`` in the same statement, so the event exists exactly when the transition happened.
Time is always the database's ``now()``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connections, transaction

from django_jobs.conf import jobs_settings
from django_jobs.states import EventKind, JobStatus


@dataclass(slots=True)
class Claim:
    """A job this worker holds: the columns an execution needs, read by the claim itself."""

    id: int
    queue: str
    type: str
    version: int
    payload: Any  # the raw jsonb text; decoded by the executor, one job at a time
    attempt: int
    max_attempts: int
    execution_id: uuid.UUID
    unique_key: str | None
    checkpoint: Any
    priority: int
    available_at: dt.datetime
    started_at: dt.datetime
    #: The error of the previous attempt: tells whether its side effect may have happened.
    last_error_code: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one execution ended, to be written by :func:`write_outcomes`."""

    job_id: int
    execution_id: uuid.UUID
    status: str  # completed, pending (retry), failed, skipped, cancelled or needs_review
    delay: float = 0.0  # seconds before a retry, counted from the database's now()
    error_code: str | None = None
    error: str | None = None
    event: str | None = None  # EventKind; None on the plain success path
    details: str | None = None  # JSON text stored on the event


_CLAIM_COLUMNS = (
    "j.id, j.queue, j.type, j.version, j.payload, j.attempts, j.max_attempts, j.execution_id,"
    " j.unique_key, j.checkpoint, j.priority, j.available_at, j.started_at, j.last_error_code"
)

# The claim takes up to %(limit)s jobs in one statement that commits by itself, before any of
# them runs. SKIP LOCKED lets concurrent workers pass over rows another claim is taking instead
# of queueing behind it. The version test keeps a worker from taking payloads newer than the
# code it runs (a rolling deploy): those stay pending for a newer worker.
_CLAIM_SET = (
    "UPDATE django_jobs_job j SET status = 'running', attempts = j.attempts + 1,"
    " worker_id = %(worker)s, execution_id = gen_random_uuid(), started_at = now(),"
    " heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => CASE j.type {leases} END)"
)
_CLAIM_FILTER = (
    "status = 'pending' AND available_at <= now() AND type = ANY(%(types)s)"
    " AND version <= CASE type {versions} END"
)
_CLAIM_ANY_QUEUE = (
    "WITH next AS ("
    f" SELECT id FROM django_jobs_job WHERE {_CLAIM_FILTER}"
    " ORDER BY priority DESC, available_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    f" {_CLAIM_SET} FROM next WHERE j.id = next.id RETURNING {_CLAIM_COLUMNS}"
)
# With named queues, one ordered scan of the (queue, priority, available_at, id) index per
# queue: a `queue = ANY(...)` filter would make PostgreSQL sort every pending row of those
# queues instead. Rows locked by a queue's subquery but cut by the outer LIMIT are unlocked
# when this statement commits.
_CLAIM_NAMED_QUEUES = (
    "WITH next AS (SELECT c.id FROM unnest(%(queues)s::text[]) AS q(name) CROSS JOIN LATERAL ("
    f" SELECT id, priority, available_at FROM django_jobs_job WHERE queue = q.name AND {_CLAIM_FILTER}"
    " ORDER BY priority DESC, available_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) c"
    " ORDER BY c.priority DESC, c.available_at, c.id LIMIT %(limit)s)"
    f" {_CLAIM_SET} FROM next WHERE j.id = next.id RETURNING {_CLAIM_COLUMNS}"
)


class ClaimStatement:
    """The claim of one worker: built once for its queues and the job types it knows.

    ``versions`` maps each type to the newest payload version the worker can decode;
    ``leases`` maps it to the lease its executions get (default ``LEASE_TIMEOUT``).
    """

    def __init__(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        versions: dict[str, int],
        leases: dict[str, float] | None = None,
    ) -> None:
        if not versions:
            raise ValueError("a worker that knows no job type can claim nothing")
        names = sorted(versions)
        leases = leases or {}
        template = _CLAIM_NAMED_QUEUES if queues else _CLAIM_ANY_QUEUE
        self.sql = template.replace(
            "{versions}", " ".join(f"WHEN %(type{i})s THEN %(version{i})s" for i in range(len(names)))
        ).replace(
            "{leases}", " ".join(f"WHEN %(type{i})s THEN %(lease{i})s::float8" for i in range(len(names)))
        )
        self._params: dict[str, Any] = {"worker": worker_id, "types": names, "queues": list(queues or [])}
        for i, name in enumerate(names):
            self._params[f"type{i}"] = name
            self._params[f"version{i}"] = versions[name]
            self._params[f"lease{i}"] = float(leases.get(name, jobs_settings.LEASE_TIMEOUT))

    def params(self, limit: int) -> dict[str, Any]:
        return {**self._params, "limit": limit}


def claim(statement: ClaimStatement, limit: int) -> list[Claim]:
    """Claim up to ``limit`` jobs, committed before this returns, best priority first."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(statement.sql, statement.params(limit))
        claims = [Claim(*row) for row in cursor.fetchall()]
    claims.sort(key=lambda c: (-c.priority, c.available_at, c.id))
    return claims


# One statement writes any mix of outcomes: the guarded UPDATE moves the rows still owned by
# their execution, and the events of the arrows that need one are inserted from what it moved.
_WRITE_OUTCOMES = """
WITH outcome AS (
    SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::float8[], %s::text[],
                         %s::text[], %s::text[], %s::jsonb[])
        AS o(id, execution_id, status, delay, error_code, error, event, details)
), moved AS (
    UPDATE django_jobs_job j SET
        status = o.status,
        available_at = CASE WHEN o.status = 'pending'
                            THEN now() + make_interval(secs => o.delay) ELSE j.available_at END,
        completed_at = CASE WHEN o.status = 'completed' THEN now() ELSE j.completed_at END,
        failed_at = CASE WHEN o.status = 'failed' THEN now() ELSE j.failed_at END,
        finished_at = CASE WHEN o.status IN ('pending', 'needs_review') THEN NULL ELSE now() END,
        last_error_code = CASE WHEN o.status = 'completed' THEN j.last_error_code ELSE o.error_code END,
        last_error = CASE WHEN o.status = 'completed' THEN j.last_error ELSE o.error END,
        lease_expires_at = NULL
    FROM outcome o
    WHERE j.id = o.id AND j.execution_id = o.execution_id AND j.status = 'running'
    RETURNING j.id, j.execution_id, j.worker_id, j.attempts, o.status, o.error_code, o.error,
              o.event, o.details
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, error_code,
         error, actor, details)
    SELECT id, event, 'running', status, execution_id, worker_id, attempts, error_code, error,
           'worker', details
    FROM moved WHERE event IS NOT NULL
)
SELECT id FROM moved
"""


def write_outcomes(outcomes: Sequence[Outcome]) -> set[int]:
    """Write finished executions; return the ids of the jobs that were still theirs.

    An id missing from the result belongs to an execution that lost its lease: the job was
    recovered and perhaps already re-run, and this outcome must not overwrite it.
    """
    if not outcomes:
        return set()
    columns: list[list[Any]] = [[] for _ in range(8)]
    for o in outcomes:
        for column, value in zip(
            columns,
            (o.job_id, o.execution_id, o.status, o.delay, o.error_code, o.error, o.event, o.details),
            strict=True,
        ):
            column.append(value)
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_WRITE_OUTCOMES, columns)
        return {row[0] for row in cursor.fetchall()}


# A worker gives back the jobs it holds when it stops. One it never started goes back to
# pending without counting the attempt. One interrupted mid-run keeps its attempt and is marked
# INTERRUPTED (its side effect may have happened): pending again, or needs_review for a type
# whose blind retry is unsafe.
_RELEASE = """
WITH outcome AS (
    SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::boolean[], %s::text[])
        AS o(id, execution_id, started, status)
), moved AS (
    UPDATE django_jobs_job j SET
        status = o.status,
        attempts = CASE WHEN o.started THEN j.attempts ELSE j.attempts - 1 END,
        available_at = now(),
        last_error_code = CASE WHEN o.started THEN 'INTERRUPTED' ELSE j.last_error_code END,
        lease_expires_at = NULL
    FROM outcome o
    WHERE j.id = o.id AND j.execution_id = o.execution_id AND j.status = 'running'
    RETURNING j.id, j.execution_id, j.worker_id, j.attempts, o.status
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, actor, reason)
    SELECT id, %s, 'running', status, execution_id, worker_id, attempts, 'worker', %s
    FROM moved
)
SELECT id FROM moved
"""


@dataclass(frozen=True, slots=True)
class Release:
    job_id: int
    execution_id: uuid.UUID
    started: bool
    status: str = JobStatus.PENDING  # or needs_review, for an interrupted unsafe job


def release(executions: Iterable[Release], reason: str) -> set[int]:
    """Give back held executions, claimable again at once (see ``_RELEASE``)."""
    rows = list(executions)
    if not rows:
        return set()
    params: list[Any] = [
        [r.job_id for r in rows],
        [r.execution_id for r in rows],
        [r.started for r in rows],
        [str(r.status) for r in rows],
        EventKind.RELEASED,
        reason,
    ]
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RELEASE, params)
        return {row[0] for row in cursor.fetchall()}


_SET_PROGRESS = (
    "UPDATE django_jobs_job SET progress = %s::jsonb"
    " WHERE id = %s AND execution_id = %s AND status = 'running'"
)
_SET_CHECKPOINT = (
    "UPDATE django_jobs_job SET checkpoint = %s::jsonb, heartbeat_at = now()"
    " WHERE id = %s AND execution_id = %s AND status = 'running'"
)


def set_progress(job_id: int, execution_id: uuid.UUID, progress_json: str) -> bool:
    """Store progress if the execution still owns the job; False means the lease was lost."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_SET_PROGRESS, [progress_json, job_id, execution_id])
        return bool(cursor.rowcount == 1)


def set_checkpoint(job_id: int, execution_id: uuid.UUID, checkpoint_json: str) -> bool:
    """Store a checkpoint if the execution still owns the job; False means the lease was lost."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_SET_CHECKPOINT, [checkpoint_json, job_id, execution_id])
        return bool(cursor.rowcount == 1)


_HEARTBEAT = """
WITH beat AS (
    SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::float8[]) AS b(id, execution_id, lease)
)
UPDATE django_jobs_job j SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => b.lease)
FROM beat b
WHERE j.id = b.id AND j.execution_id = b.execution_id AND j.status = 'running'
RETURNING j.id, j.cancel_requested_at IS NOT NULL
"""


def heartbeat(leases: Iterable[tuple[int, uuid.UUID, float]]) -> dict[int, bool]:
    """Extend the leases ``(job_id, execution_id, seconds)`` still owned, in one statement.

    Returns ``{job_id: cancel_requested}`` for the executions that still own their job; a job
    missing from it was taken over, and its execution must stop.
    """
    rows = list(leases)
    if not rows:
        return {}
    ids, execution_ids, seconds = (list(column) for column in zip(*rows, strict=True))
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_HEARTBEAT, [ids, execution_ids, seconds])
        return {row[0]: row[1] for row in cursor.fetchall()}


# ---- cancellation -----------------------------------------------------------------------------

_CANCEL_PENDING = """
WITH moved AS (
    UPDATE django_jobs_job SET status = 'cancelled', cancel_requested_at = now(), finished_at = now()
    WHERE id = %(id)s AND status = 'pending'
    RETURNING id, attempts
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason)
    SELECT id, 'cancelled', 'pending', 'cancelled', attempts, %(actor)s, %(reason)s FROM moved
)
SELECT id FROM moved
"""
# A running job cannot be stopped from outside: its execution learns of the request from its
# heartbeat and ends the job cancelled itself.
_CANCEL_RUNNING = """
WITH marked AS (
    UPDATE django_jobs_job SET cancel_requested_at = now()
    WHERE id = %(id)s AND status = 'running' AND cancel_requested_at IS NULL
    RETURNING id, execution_id, worker_id, attempts
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, actor, reason)
    SELECT id, 'cancel_requested', 'running', 'running', execution_id, worker_id, attempts,
           %(actor)s, %(reason)s
    FROM marked
)
SELECT id FROM marked
"""


class CancelResult:
    CANCELLED = "cancelled"  # it was pending: cancelled at once
    REQUESTED = "requested"  # it is running: its execution will stop cooperatively
    NOT_CANCELLABLE = "not_cancellable"  # finished, or cancellation already requested


def cancel(job_id: int, *, actor: str | None = None, reason: str | None = None) -> str:
    """Cancel a job: a pending one at once, a running one cooperatively. Returns a ``CancelResult``."""
    params = {"id": job_id, "actor": actor, "reason": reason}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_CANCEL_PENDING, params)
        if cursor.fetchall():
            return CancelResult.CANCELLED
        cursor.execute(_CANCEL_RUNNING, params)
        if cursor.fetchall():
            return CancelResult.REQUESTED
    return CancelResult.NOT_CANCELLABLE


# ---- operators' actions ---------------------------------------------------------------------

RETRYABLE_BY_OPERATOR = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW)


class ActionRefused(Exception):
    """An operator's action cannot apply to this job (its state changed, or a rule forbids it)."""


# The old row is locked first so the event can say which state the job left.
_MANUAL_RETRY = """
WITH old AS (
    SELECT id, status, attempts FROM django_jobs_job
    WHERE id = %(id)s AND status IN ('failed', 'cancelled', 'needs_review')
    FOR UPDATE
), moved AS (
    UPDATE django_jobs_job j SET
        status = 'pending', attempts = 0, available_at = now(), finished_at = NULL,
        cancel_requested_at = NULL, worker_id = NULL, execution_id = NULL, heartbeat_at = NULL,
        lease_expires_at = NULL, manual_retries = j.manual_retries + 1, retried_by = %(actor)s,
        retried_at = now()
    FROM old WHERE j.id = old.id AND j.status = old.status
    RETURNING j.id, old.status, old.attempts, j.manual_retries
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason, details)
    SELECT id, 'manual_retry', status, 'pending', attempts, %(actor)s, %(reason)s,
           jsonb_build_object('manual_retries', manual_retries)
    FROM moved
)
SELECT id, status FROM moved
"""


def manual_retry(job_id: int, *, actor: str, reason: str) -> str:
    """An operator's retry: a failed, cancelled or parked job becomes pending with a fresh
    attempt budget. Returns the status it left.

    Raises ``ActionRefused`` if the job is in another state, or if another active job of its
    type holds its unique key (the retry would run the same work twice at once).
    """
    alias = jobs_settings.DATABASE
    try:
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute(_MANUAL_RETRY, {"id": job_id, "actor": actor, "reason": reason})
            row = cursor.fetchone()
    except IntegrityError as exc:
        raise ActionRefused(
            f"job {job_id} was not retried: another pending or running job of its type holds its unique key"
        ) from exc
    if row is None:
        raise ActionRefused(f"job {job_id} was not retried: only failed, cancelled or parked jobs can be")
    return str(row[1])


_RESOLVE = """
WITH moved AS (
    UPDATE django_jobs_job SET
        status = %(to)s, finished_at = now(),
        completed_at = CASE WHEN %(to)s = 'completed' THEN now() ELSE completed_at END,
        failed_at = CASE WHEN %(to)s = 'failed' THEN now() ELSE failed_at END
    WHERE id = %(id)s AND status = 'needs_review'
    RETURNING id, attempts
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason)
    SELECT id, 'resolved', 'needs_review', %(to)s, attempts, %(actor)s, %(reason)s FROM moved
)
SELECT id FROM moved
"""


def resolve(job_id: int, *, to: str, actor: str, reason: str) -> None:
    """Close a ``needs_review`` job after a human checked it: ``to`` is completed or failed.

    Raises ``ActionRefused`` if the job no longer needs review.
    """
    if to not in (JobStatus.COMPLETED, JobStatus.FAILED):
        raise ValueError("a job under review is resolved as completed or failed")
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RESOLVE, {"id": job_id, "to": str(to), "actor": actor, "reason": reason})
        if cursor.fetchone() is None:
            raise ActionRefused(f"job {job_id} was not resolved: it does not need review")


# ---- live workers ------------------------------------------------------------------------------

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


# ---- recovery of expired leases (the reaper) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expired:
    """A running job whose lease expired: its execution is presumed lost."""

    id: int
    type: str
    execution_id: uuid.UUID
    worker_id: str | None
    attempt: int
    max_attempts: int


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the reaper decided for one expired execution."""

    expired: Expired
    status: str  # pending, failed or needs_review
    delay: float = 0.0
    reason: str = ""


_SELECT_EXPIRED = """
SELECT id, type, execution_id, worker_id, attempts, max_attempts FROM django_jobs_job
WHERE status = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at LIMIT %s
FOR UPDATE SKIP LOCKED
"""
_RECOVER = """
WITH decision AS (
    SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::text[], %s::float8[], %s::text[])
        AS d(id, execution_id, worker_id, status, delay, reason)
), moved AS (
    UPDATE django_jobs_job j SET
        status = d.status,
        available_at = CASE WHEN d.status = 'pending'
                            THEN now() + make_interval(secs => d.delay) ELSE j.available_at END,
        failed_at = CASE WHEN d.status = 'failed' THEN now() ELSE j.failed_at END,
        finished_at = CASE WHEN d.status = 'failed' THEN now() END,
        last_error_code = 'LEASE_LOST',
        last_error = d.reason,
        worker_id = NULL, execution_id = NULL, heartbeat_at = NULL, lease_expires_at = NULL
    FROM decision d
    WHERE j.id = d.id AND j.execution_id = d.execution_id AND j.status = 'running'
      AND j.lease_expires_at < now()
    RETURNING j.id, j.attempts, d.status, d.execution_id, d.worker_id, d.reason, d.delay
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, error_code,
         error, actor, details)
    SELECT id, 'recovered', 'running', status, execution_id, worker_id, attempts, 'LEASE_LOST',
           reason, 'reaper',
           CASE WHEN status = 'pending' THEN jsonb_build_object('retry_in', round(delay::numeric, 3)) END
    FROM moved
)
SELECT id, status FROM moved
"""


def recover_expired(decide: Callable[[Expired], Recovery], limit: int) -> list[Recovery]:
    """Take back up to ``limit`` running jobs whose lease expired, as ``decide`` says.

    Locks the expired rows with SKIP LOCKED, so reapers in many processes split the work, and
    moves each one only if it is still the same expired execution. Returns what was done.
    """
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_SELECT_EXPIRED, [limit])
        decisions = [decide(Expired(*row)) for row in cursor.fetchall()]
        if not decisions:
            return []
        cursor.execute(
            _RECOVER,
            [
                [r.expired.id for r in decisions],
                [r.expired.execution_id for r in decisions],
                [r.expired.worker_id for r in decisions],
                [r.status for r in decisions],
                [r.delay for r in decisions],
                [r.reason for r in decisions],
            ],
        )
        moved = {row[0] for row in cursor.fetchall()}
    return [r for r in decisions if r.expired.id in moved]


# ---- retention --------------------------------------------------------------------------------

# Events go with their job (the foreign key has no ON DELETE CASCADE in the database: Django
# emulates it, and this statement does not go through the ORM). Batches keep locks and WAL small.
_PRUNE = """
WITH doomed AS (
    SELECT id FROM django_jobs_job
    WHERE status = %s AND finished_at < now() - make_interval(secs => %s)
    ORDER BY finished_at LIMIT %s
    FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM django_jobs_jobevent WHERE job_id IN (SELECT id FROM doomed)
)
DELETE FROM django_jobs_job WHERE id IN (SELECT id FROM doomed)
"""


def prune(status: str, older_than: float, limit: int) -> int:
    """Delete up to ``limit`` jobs in ``status`` finished more than ``older_than`` seconds ago."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_PRUNE, [status, older_than, limit])
        return int(cursor.rowcount)


__all__ = [
    "ActionRefused",
    "CancelResult",
    "Claim",
    "ClaimStatement",
    "Expired",
    "JobStatus",
    "Outcome",
    "Recovery",
    "Release",
    "cancel",
    "claim",
    "forget_worker",
    "heartbeat",
    "manual_retry",
    "prune",
    "recover_expired",
    "release",
    "report_worker",
    "resolve",
    "set_checkpoint",
    "set_progress",
    "write_outcomes",
]
