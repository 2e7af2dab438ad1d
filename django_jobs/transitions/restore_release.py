"""The release of a restore hold: in one transaction, the hold is closed with who and why, and
the jobs it kept are settled, each with an event (see docs/operations/restore.md)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from dataclasses import dataclass

from django.db import connections, transaction

from django_jobs.conf import jobs_settings
from django_jobs.transitions.operator import ActionRefused

_LOCK_OPEN = (
    "SELECT opened_at FROM django_jobs_restorehold WHERE id = %s AND released_at IS NULL FOR UPDATE"
)
_RELEASE = """
UPDATE django_jobs_restorehold SET released_at = now(), released_by = %(actor)s,
    release_reason = %(reason)s, settled = %(settled)s
WHERE id = %(id)s
"""
# The jobs a hold kept are those of external types enqueued before it opened and not ended: any
# of them may have run after the restore point, its end lost with the rest of the database.
#
# A pending one is settled now: it asks its type's reconcile before it runs again (the mark is
# its error code, RESTORED), or is parked for review when its type cannot ask. A workflow's step
# still waiting for the jobs before it (in the lost timeline they may have ended, and it run) is
# marked the same way but keeps waiting: it starts only once they have ended here too, and then
# asks reconcile first, or is parked for review as it becomes due (the barrier reads the mark
# and ``on_lost``, which the release sets to what its type can do now). An answer applies to
# either at once: done completes it (counted in its workflow's barrier like any end), not done
# leaves it as it is, unmarked. FOR UPDATE: a claim that took one meanwhile is waited for, and
# the job is then left to that execution.
_SETTLE_NOT_STARTED = """
WITH held AS (
    SELECT id, status, attempts, last_error_code, type = ANY(%(reconcilable)s) AS reconciles
    FROM django_jobs_job
    WHERE type = ANY(%(types)s) AND status IN ('pending', 'waiting') AND created_at < %(opened_at)s
    FOR UPDATE
), settled AS (
    SELECT h.*, CASE WHEN h.id = ANY(%(done)s) THEN 'done'
                     WHEN h.id = ANY(%(not_done)s) THEN 'not_done' END AS answer
    FROM held h
), moved AS (
    UPDATE django_jobs_job j SET
        status = CASE WHEN s.answer = 'done' THEN 'completed'
                      WHEN s.status = 'waiting' THEN 'waiting'
                      WHEN s.answer = 'not_done' OR s.reconciles THEN 'pending'
                      ELSE 'needs_review' END,
        completed_at = CASE WHEN s.answer = 'done' THEN now() ELSE j.completed_at END,
        finished_at = CASE WHEN s.answer = 'done' THEN now() ELSE j.finished_at END,
        on_lost = CASE WHEN s.status = 'waiting' AND s.answer IS NULL
                       THEN CASE WHEN s.reconciles THEN 'reconcile' ELSE 'needs_review' END
                       ELSE j.on_lost END,
        last_error_code = CASE WHEN s.answer IS NULL THEN 'RESTORED' ELSE j.last_error_code END,
        last_error = CASE WHEN s.answer IS NOT NULL THEN j.last_error
                          WHEN s.reconciles THEN %(to_reconcile)s ELSE %(to_review)s END
    FROM settled s WHERE j.id = s.id AND j.status = s.status
    RETURNING j.id, s.status AS from_status, j.status, s.answer, j.last_error_code, j.last_error,
              s.attempts, s.last_error_code AS previous_error_code
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, attempt, error_code, error, actor, reason, details)
    SELECT m.id, e.kind, e.from_status, e.to_status, m.attempts, e.error_code, e.error,
           %(actor)s, %(event_reason)s,
           jsonb_build_object('restore_hold', %(hold)s, 'previous_error_code', m.previous_error_code,
                              'answer', m.answer)
    FROM moved m CROSS JOIN LATERAL (
        -- Found done: parked and resolved by the same person in one act (a job not started
        -- never completes without running or a review).
        SELECT * FROM (VALUES (1, 'needs_review', m.from_status, 'needs_review', NULL::text, NULL::text),
                              (2, 'resolved', 'needs_review', 'completed', NULL, NULL))
            AS v(step, kind, from_status, to_status, error_code, error)
        WHERE m.answer = 'done'
        UNION ALL
        SELECT 1, CASE WHEN m.status = 'needs_review' THEN 'needs_review' ELSE 'restore_released' END,
               m.from_status, m.status,
               CASE WHEN m.answer IS NULL THEN m.last_error_code END,
               CASE WHEN m.answer IS NULL THEN m.last_error END
        WHERE m.answer IS DISTINCT FROM 'done'
    ) e
    ORDER BY m.id, e.step
)
SELECT count(*) FILTER (WHERE status = 'pending' AND answer IS NULL),
       count(*) FILTER (WHERE status = 'needs_review'),
       count(*) FILTER (WHERE answer = 'done'),
       count(*) FILTER (WHERE answer = 'not_done'),
       count(*) FILTER (WHERE status = 'waiting' AND answer IS NULL)
FROM moved
"""
# The jobs an operator answered for must all be among those the hold keeps from starting (pending,
# or a workflow's step waiting): one that is not (no such job, another type, running, ended,
# enqueued since) refuses the whole release.
_ANSWERED = """
SELECT id, type, status, created_at < %(opened_at)s FROM django_jobs_job
WHERE id = ANY(%(answered)s) FOR UPDATE
"""
# A running one keeps its execution: a worker may be running it now, and its outcome stands.
# But if that execution is lost, its type's policy for a lost execution gives way: it is
# reconciled or parked, never retried blindly (the marks of the external calls it made after
# the restore point are gone with the rest, so they cannot vouch for it).
_SETTLE_RUNNING = """
WITH moved AS (
    UPDATE django_jobs_job SET
        on_lost = CASE WHEN type = ANY(%(reconcilable)s) THEN 'reconcile' ELSE 'needs_review' END,
        on_lost_in_call = NULL
    WHERE type = ANY(%(types)s) AND status = 'running' AND created_at < %(opened_at)s
    RETURNING id, execution_id, worker_id, attempts, on_lost
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, actor, reason, details)
    SELECT id, 'restore_released', 'running', 'running', execution_id, worker_id, attempts,
           %(actor)s, %(event_reason)s,
           jsonb_build_object('restore_hold', %(hold)s, 'if_lost', on_lost)
    FROM moved
)
SELECT count(*) FROM moved
"""
_TO_RECONCILE = (
    "restored from backup: an execution after the restore point may have done its effect; "
    "reconcile asks the provider before the job runs again"
)
_TO_REVIEW = (
    "restored from backup: an execution after the restore point may have done its effect, and "
    "this type cannot reconcile; check with the provider, then resolve or retry the job"
)


@dataclass(frozen=True, slots=True)
class Settled:
    """What releasing a hold did with the jobs it kept."""

    #: Pending jobs whose next execution asks their type's ``reconcile`` first.
    to_reconcile: int
    #: Pending jobs of types that cannot reconcile, parked in ``needs_review``.
    to_review: int
    #: Running jobs left to their execution, reconciled or parked if it is lost.
    running: int
    #: Pending jobs and waiting steps the operator found done at the provider: completed
    #: without running (a step counts as ended in its workflow).
    done: int = 0
    #: Pending jobs and waiting steps the operator found not done: they run again as they are.
    not_done: int = 0
    #: Workflow steps still waiting for the jobs before them: once those have ended, each asks
    #: its type's ``reconcile`` first, or is parked in ``needs_review`` as it becomes due.
    waiting: int = 0

    def as_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def release(
    hold_id: int,
    *,
    actor: str,
    reason: str,
    reconcilable: Collection[str],
    hookless: Collection[str],
    done: Collection[int] = (),
    not_done: Collection[int] = (),
) -> Settled:
    """Release the open hold ``hold_id`` and settle the jobs it kept, in one transaction: those
    the operator answered for are completed (``done``) or run again as they are (``not_done``);
    of the others, those of ``reconcilable`` types reconcile first and those of ``hookless``
    types are parked; a workflow's step that waits keeps waiting, marked so that it does either
    once it is due (see ``_SETTLE_NOT_STARTED`` and ``_SETTLE_RUNNING``). Raises
    ``ActionRefused``, having written nothing, if the hold is not open or an answered job is not
    one it keeps from starting."""
    alias = jobs_settings.DATABASE
    types = sorted({*reconcilable, *hookless})
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_LOCK_OPEN, [hold_id])
        row = cursor.fetchone()
        if row is None:
            raise ActionRefused(f"restore hold {hold_id} is not open")
        opened_at = row[0]
        answered = sorted({*done, *not_done})
        if answered:
            cursor.execute(_ANSWERED, {"answered": answered, "opened_at": opened_at})
            found = {int(r[0]): (str(r[1]), str(r[2]), bool(r[3])) for r in cursor.fetchall()}
            problems = [_not_held(job_id, found.get(job_id), types, hold_id) for job_id in answered]
            if any(problems):
                raise ActionRefused("; ".join(p for p in problems if p))
        params = {
            "hold": hold_id,
            "opened_at": opened_at,
            "types": types,
            "reconcilable": sorted(reconcilable),
            "done": sorted(done),
            "not_done": sorted(not_done),
            "actor": actor,
            "event_reason": f"restored from backup (restore hold {hold_id}): {reason}",
            "to_reconcile": _TO_RECONCILE,
            "to_review": _TO_REVIEW,
        }
        cursor.execute(_SETTLE_NOT_STARTED, params)
        to_reconcile, to_review, answered_done, answered_not_done, waiting = cursor.fetchone()
        cursor.execute(_SETTLE_RUNNING, params)
        (running,) = cursor.fetchone()
        settled = Settled(to_reconcile, to_review, running, answered_done, answered_not_done, waiting)
        summary = json.dumps(settled.as_json())
        cursor.execute(_RELEASE, {"id": hold_id, "actor": actor, "reason": reason, "settled": summary})
    return settled


def _not_held(job_id: int, found: tuple[str, str, bool] | None, types: list[str], hold_id: int) -> str:
    """Why job ``job_id`` is not one the hold keeps from starting; "" if it is."""
    if found is None:
        return f"no job {job_id}"
    job_type, status, before = found
    if job_type not in types:
        return f"job {job_id} is not held: its type {job_type} acts inside the database"
    if not before:
        return f"job {job_id} is not held: it was enqueued after restore hold {hold_id} opened"
    if status not in ("pending", "waiting"):
        return (
            f"job {job_id} is {status}: only a job not started (pending, or a workflow's step "
            "waiting) can be answered for"
        )
    return ""
