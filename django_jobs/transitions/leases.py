"""The writes of a running execution that keep or end its hold: heartbeats (extending leases,
recording prefetched starts, reporting cancel requests), progress, checkpoints, and leases cut
short at a worker's exit.

Each is guarded by ``(id, execution_id, status='running')``: an execution that lost its job
changes nothing, and learns it from the result.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.transitions.cursor import bound_cursor, seconds
from django_jobs.transitions.guards import STILL_RUNNING

# A worker that exits with executions still running cuts their leases short: they end with
# the process, so the reaper may take the jobs back soon after, and not a whole lease later.
_CUT_LEASES = (
    "UPDATE django_jobs_job j"
    " SET lease_expires_at = LEAST(j.lease_expires_at, now() + make_interval(secs => %s))"
    f" WHERE j.id = ANY(%s) AND j.execution_id = ANY(%s) AND {STILL_RUNNING}"
)


def cut_leases(executions: Sequence[tuple[int, uuid.UUID]], seconds: float) -> int:
    """Make the leases of ``(job_id, execution_id)`` expire within ``seconds``; returns how many."""
    if not executions:
        return 0
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_CUT_LEASES, [seconds, [e[0] for e in executions], [e[1] for e in executions]])
        return int(cursor.rowcount)


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


# Extends the leases that are due (lease > 0), records the start of prefetched executions that
# began since the last beat (ran_for: seconds they have been running) and reports cancel
# requests, for every execution still owning its job.
_HEARTBEAT = f"""
WITH beat AS (
    SELECT * FROM unnest(%b::bigint[], %b::uuid[], %b::float8[], %b::float8[])
        AS b(id, execution_id, lease, ran_for)
)
UPDATE django_jobs_job j SET
    heartbeat_at = CASE WHEN b.lease > 0 THEN now() ELSE j.heartbeat_at END,
    lease_expires_at = CASE WHEN b.lease > 0 THEN now() + make_interval(secs => b.lease)
                            ELSE j.lease_expires_at END,
    attempts = j.attempts + (j.started_at IS NULL AND b.ran_for IS NOT NULL)::int,
    started_at = CASE WHEN j.started_at IS NULL AND b.ran_for IS NOT NULL
                      THEN now() - make_interval(secs => b.ran_for) ELSE j.started_at END
FROM beat b
WHERE j.id = b.id AND j.execution_id = b.execution_id AND {STILL_RUNNING}
RETURNING j.id, j.cancel_requested_at IS NOT NULL
"""


@dataclass(frozen=True, slots=True)
class Beat:
    """One execution's entry in a heartbeat."""

    job_id: int
    execution_id: uuid.UUID
    #: Seconds to extend the lease by from now; 0 only checks ownership and cancel requests.
    lease: float
    #: Seconds the handler has been running, for a prefetched execution whose start is not
    #: recorded yet; None otherwise.
    ran_for: float | None = None


def heartbeat(beats: Iterable[Beat | tuple[int, uuid.UUID, float]]) -> dict[int, bool]:
    """Beat for executions in one statement (see ``_HEARTBEAT``).

    Returns ``{job_id: cancel_requested}`` for the executions that still own their job; a job
    missing from it was taken over, and its execution must stop.
    """
    rows = [b if isinstance(b, Beat) else Beat(*b) for b in beats]
    if not rows:
        return {}
    with bound_cursor(jobs_settings.DATABASE) as cursor:
        cursor.execute(
            _HEARTBEAT,
            [
                [b.job_id for b in rows],
                [b.execution_id for b in rows],
                seconds(b.lease for b in rows),
                seconds(b.ran_for for b in rows),
            ],
        )
        return {row[0]: row[1] for row in cursor.fetchall()}
