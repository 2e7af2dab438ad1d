"""An operator's retry of a job by hand: a failed, cancelled or parked job gets a fresh attempt
budget, fenced like every action of ``operator`` by what the operator saw.

A job of a workflow is retried by its workflow's rules, inside the same statement: a step
goes where its gate says (``workflow_triggers``), the steps its retry would resume must be
free to hold their unique keys, and a workflow cut apart by retention is not resumed. The
retry is refused, naming why, before anything is written.

A retried job has no start-by deadline any more (a person asked for it to run now, and a job
that expired would otherwise expire again at once), nor a debounce key: a debounced enqueue
never updates a job an operator retried.
"""

from __future__ import annotations

from django.db import IntegrityError, connections, transaction

from django_jobs.conf import jobs_settings
from django_jobs.states import KEY_HOLDING_STATUSES
from django_jobs.transitions.operator import _FENCE, _LINK, ActionRefused, Seen, _fenced

_HOLDING = ", ".join(f"'{status}'" for status in sorted(KEY_HOLDING_STATUSES))

# The old row is locked first so the event can say which state the job left. A step of a
# workflow goes where its gate says (``workflow_triggers._STEP_GATE``: pending when the jobs it
# waits for ended as it needs, else back to waiting; refused when nothing could make it due);
# any other job to pending. The retry is refused too, before it writes anything, if the stopped steps it
# would resume hold a unique key another job has taken since (``clash``), or if retention
# removed part of its workflow (``cut``: by a release that pruned workflows job by job).
_MANUAL_RETRY = f"""
WITH RECURSIVE old AS (
    SELECT id, status, attempts, workflow_id FROM django_jobs_job
    WHERE id = %(id)s AND status IN ('failed', 'cancelled', 'needs_review') AND {_FENCE}
    FOR UPDATE
), gate AS (
    SELECT id, CASE WHEN workflow_id IS NULL THEN NULL ELSE django_jobs_step_gate(id) END AS gate FROM old
), cut AS (
    SELECT w.id, w.size, (SELECT count(*) FROM django_jobs_workflowstep s WHERE s.workflow_id = w.id) AS kept
    FROM old JOIN django_jobs_workflow w ON w.id = old.workflow_id
), reached(barrier) AS (
    -- The barriers whose stopped steps this retry may resume: the one the job feeds, then the
    -- ones those steps feed, each with its tree's parent.
    SELECT x.barrier FROM old
    JOIN django_jobs_workflowstep s ON s.job_id = old.id
    JOIN django_jobs_barrier b ON b.id = s.feeds_id
    CROSS JOIN LATERAL (VALUES (b.id), (b.parent_id)) AS x(barrier)
    WHERE x.barrier IS NOT NULL
    UNION
    SELECT x.barrier FROM reached r
    JOIN django_jobs_workflowstep s ON s.waits_on_id = r.barrier AND s.stopped
    JOIN django_jobs_barrier b ON b.id = s.feeds_id
    CROSS JOIN LATERAL (VALUES (b.id), (b.parent_id)) AS x(barrier)
    WHERE x.barrier IS NOT NULL
), clash AS (
    SELECT j.id, j.unique_key, h.id AS holder FROM reached r
    JOIN django_jobs_workflowstep s ON s.waits_on_id = r.barrier AND s.stopped
    JOIN django_jobs_job j ON j.id = s.job_id AND j.status = 'cancelled' AND j.unique_key IS NOT NULL
    JOIN django_jobs_job h ON h.type = j.type AND h.unique_key = j.unique_key
        AND h.status IN ({_HOLDING}) AND h.id <> j.id
    ORDER BY j.id LIMIT 1
), moved AS (
    UPDATE django_jobs_job j SET
        status = CASE WHEN gate.gate = 'waiting' THEN 'waiting' ELSE 'pending' END,
        attempts = 0, available_at = now(), ready = gate.gate IS DISTINCT FROM 'waiting',
        finished_at = NULL, cancel_requested_at = NULL, worker_id = NULL, execution_id = NULL,
        heartbeat_at = NULL, lease_expires_at = NULL, failed_at = NULL, completed_at = NULL,
        start_by = NULL, debounce_key = NULL, manual_retries = j.manual_retries + 1, retried_by = %(actor)s,
        retried_at = now(), trace_context = COALESCE(%(trace_context)s::jsonb, j.trace_context)
    FROM old JOIN gate ON gate.id = old.id
    WHERE j.id = old.id AND j.status = old.status AND gate.gate IS DISTINCT FROM 'refused'
      AND NOT EXISTS (SELECT 1 FROM clash) AND NOT EXISTS (SELECT 1 FROM cut WHERE kept < size)
    RETURNING j.id, old.status, old.attempts, j.manual_retries, j.status AS went
), events AS (
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason, details)
    SELECT id, 'manual_retry', status, went, attempts, %(actor)s, %(reason)s,
           jsonb_build_object('manual_retries', manual_retries) || coalesce({_LINK}, '{{}}')
    FROM moved
)
SELECT (SELECT status FROM moved), (SELECT gate FROM gate),
       (SELECT ARRAY[id::text, unique_key, holder::text] FROM clash),
       (SELECT ARRAY[id, size, kept] FROM cut WHERE kept < size)
"""


class KeyHeld(ActionRefused):
    """The retry would make a second live job of its type with the same unique key: the job's
    own, or a stopped step's that the retry would resume."""


class StepRefused(ActionRefused):
    """The retry would leave a workflow's step waiting for what can never come (an
    ``on_failure`` whose members all succeeded), or resume a workflow that retention has cut."""


def manual_retry(
    job_id: int, *, actor: str, reason: str, seen: Seen | None = None, trace_context: str | None = None
) -> str:
    """An operator's retry: a failed, cancelled or parked job becomes pending with a fresh
    attempt budget, or, for a workflow's step whose jobs before it have not all ended as it
    needs, waiting again (for them to end, or for an operator's retry of the one that
    failed). Returns the status it left. ``trace_context`` (JSON text), when the retry is
    traced, replaces the one the job stored: its next executions are the retry's children.

    Raises ``ActionRefused`` if the job is in another state (or no longer as ``seen``);
    ``StepRefused`` if it is a workflow's step that no retry could make due (an
    ``on_failure`` whose members all succeeded), or its workflow lost jobs to retention;
    ``KeyHeld`` if another active job holds its unique key, or the key of a stopped step the
    retry would resume (the retry would run the same work twice at once).
    Nothing is written then.
    """
    alias = jobs_settings.DATABASE
    params = _fenced({"id": job_id, "actor": actor, "reason": reason, "trace_context": trace_context}, seen)
    try:
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute(_MANUAL_RETRY, params)
            left, gate, clash, cut = cursor.fetchone()
            if left is None and gate == "refused":
                raise StepRefused(_unmet(job_id))
    except IntegrityError as exc:
        raise KeyHeld(_own_key_held(job_id)) from exc
    if clash is not None:
        step, key, holder = clash
        raise KeyHeld(
            f"job {job_id} was not retried: it would resume job {step}, which its workflow stopped, "
            f"and job {holder} holds that job's unique key {key!r} now"
        )
    if cut is not None:
        workflow, size, kept = cut
        raise StepRefused(
            f"job {job_id} was not retried: retention removed {size - kept} of the {size} jobs of "
            f"its workflow #{workflow}, so it cannot resume it"
        )
    if left is None:
        if seen is not None:
            taken = "the operation took it" if seen.operation is not None else "it was seen"
            raise ActionRefused(f"job {job_id} was not retried: it changed since {taken}")
        raise ActionRefused(f"job {job_id} was not retried: only failed, cancelled or parked jobs can be")
    return str(left)


# The jobs a refused step waited for that decide against it, and its condition.
def _unmet(job_id: int) -> str:
    # The gate refuses only a step that runs after a failure, once all it waits for succeeded.
    return (
        f"job {job_id} was not retried: it runs only if one of the jobs it waits for failed or "
        "was cancelled, and every one of them succeeded: no retry can make it due"
    )


_OWN_KEY_HOLDER = f"""
SELECT h.id, h.status, j.unique_key FROM django_jobs_job j
JOIN django_jobs_job h ON h.type = j.type AND h.unique_key = j.unique_key AND h.id <> j.id
WHERE j.id = %s AND h.status IN ({_HOLDING})
LIMIT 1
"""


def _own_key_held(job_id: int) -> str:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_OWN_KEY_HOLDER, [job_id])
        row = cursor.fetchone()
    if row is None:  # the holder ended since the refusal
        return (
            f"job {job_id} was not retried: another pending, running or parked job of its type "
            "held its unique key"
        )
    holder, status, key = row
    return f"job {job_id} was not retried: job {holder} ({status}) holds its unique key {key!r}"
