"""The writes of one execution: its claim, heartbeats, progress, checkpoint, outcome or release.

Claims and outcomes are the hot path: one statement per batch of jobs each. Every write after
the claim is guarded by ``(id, execution_id, status='running')``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

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
