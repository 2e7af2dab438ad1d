"""The arrows of workflows written by statements: jobs born pending or waiting (with their
workflow, barriers and steps), and an operator's cancel of a whole workflow. The arrows a
member's end causes (a step made due, stopped or resumed) are the triggers'
(``transitions.workflow_triggers``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.states import KEY_HOLDING_STATUSES

_HOLDING = ", ".join(f"'{status}'" for status in sorted(KEY_HOLDING_STATUSES))

# ---- enqueue ------------------------------------------------------------------------------

INSERT_WORKFLOW = "INSERT INTO django_jobs_workflow (kind, name, size) VALUES (%s, %s, %s) RETURNING id"

#: Barriers of a workflow: (size, parent id or NULL) each; returns their ids in order. Parents
#: are inserted by one statement, their leaves by the next.
INSERT_BARRIERS = """
INSERT INTO django_jobs_barrier (workflow_id, parent_id, size, remaining, failed)
SELECT %(workflow)s, b.parent, b.size, b.size, 0
FROM unnest(%(sizes)s::int[], %(parents)s::bigint[]) WITH ORDINALITY AS b(size, parent, n)
ORDER BY b.n
RETURNING id
"""

# Members born pending (nothing to wait for) or waiting, each with its own type and options.
# RETURNING follows the order of unnest(). A member whose unique key another job holds is not
# inserted; the caller refuses the whole workflow then.
_MEMBERS = (
    "queue, type, version, payload, status, priority, available_at, attempts, max_attempts, unique_key,"
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call, workflow_id, trace_context"
)
_INSERT_MEMBERS = f"""
INSERT INTO django_jobs_job ({_MEMBERS})
SELECT r.queue, r.type, r.version, r.payload::jsonb, r.status, r.priority,
       COALESCE(r.run_at, now() + make_interval(secs => r.delay)), 0, r.max_attempts, r.unique_key,
       r.on_lost, r.concurrency_key, r.concurrency_limit, r.on_lost_in_call, %(workflow)s,
       %(trace_context)s::jsonb
FROM unnest(%(queues)s::text[], %(types)s::text[], %(versions)s::int[], %(payloads)s::text[],
            %(statuses)s::text[], %(priorities)s::int[], %(run_ats)s::timestamptz[],
            %(delays)s::float8[], %(max_attempts)s::int[], %(keys)s::text[], %(on_losts)s::text[],
            %(concurrency_keys)s::text[], %(concurrency_limits)s::int[], %(on_lost_in_calls)s::text[])
     WITH ORDINALITY AS r(queue, type, version, payload, status, priority, run_at, delay,
                          max_attempts, unique_key, on_lost, concurrency_key, concurrency_limit,
                          on_lost_in_call, n)
WHERE r.status IN ('pending', 'waiting')
ORDER BY r.n
ON CONFLICT (type, unique_key) WHERE status IN ({_HOLDING}) AND unique_key IS NOT NULL DO NOTHING
RETURNING id, type, unique_key
"""

INSERT_STEPS = """
INSERT INTO django_jobs_workflowstep
    (job_id, workflow_id, position, stage, role, feeds_id, waits_on_id, runs_if, delay, stopped)
SELECT s.job, %(workflow)s, s.n - 1, s.stage, s.role, s.feeds, s.waits_on, s.runs_if, s.delay, false
FROM unnest(%(jobs)s::bigint[], %(stages)s::int[], %(roles)s::text[], %(feeds)s::bigint[],
            %(waits_on)s::bigint[], %(runs_if)s::text[], %(delays)s::float8[])
     WITH ORDINALITY AS s(job, stage, role, feeds, waits_on, runs_if, delay, n)
"""

#: Which of these unique keys of a type are held, and by which job.
KEY_HOLDERS = (
    "SELECT unique_key, id FROM django_jobs_job"
    f" WHERE type = %s AND unique_key = ANY(%s) AND status IN ({_HOLDING})"
)

# ---- an operator cancels a workflow -------------------------------------------------------

# One statement: every member not ended is locked first, in id order, whatever its status (a
# worker's claim skips a locked row; an outcome waits for it), then each is cancelled if it has
# not started, or asked to stop if it runs: by the status the lock found, the newest. Two
# statements would read two snapshots, and a member claimed between them would be neither a
# pending one to cancel nor a running one to stop. Running members learn of it from their
# heartbeats and end cancelled. (Job rows are locked before any barrier: an outcome written
# meanwhile waits on its job's row, never on a barrier this holds.)
_CANCEL_MEMBERS = """
WITH locked AS (
    SELECT id, status FROM django_jobs_job
    WHERE workflow_id = %(workflow)s AND status IN ('pending', 'waiting', 'running')
    ORDER BY id FOR UPDATE
), asked AS (
    UPDATE django_jobs_job j SET cancel_requested_at = now()
    FROM locked WHERE j.id = locked.id AND locked.status = 'running' AND j.cancel_requested_at IS NULL
    RETURNING j.id, j.execution_id, j.worker_id, j.attempts
), moved AS (
    UPDATE django_jobs_job j SET status = 'cancelled', cancel_requested_at = now(), finished_at = now()
    FROM locked WHERE j.id = locked.id AND locked.status IN ('pending', 'waiting')
    RETURNING j.id, locked.status, j.attempts
), events AS (
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, execution_id, worker_id, attempt, actor, reason)
    SELECT id, 'cancel_requested', 'running', 'running', execution_id, worker_id, attempts,
           %(actor)s, %(reason)s
    FROM asked
    UNION ALL
    SELECT id, 'cancelled', status, 'cancelled', NULL, NULL, attempts, %(actor)s, %(reason)s FROM moved
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM asked)
"""


def cancel_workflow(workflow_id: int, *, actor: str | None, reason: str | None) -> tuple[int, int]:
    """Cancel every member of the workflow not started, and request the cancel of the running
    ones, in one statement; returns (cancelled, requested)."""
    params = {"workflow": workflow_id, "actor": actor, "reason": reason}
    alias = jobs_settings.DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(_CANCEL_MEMBERS, params)
        cancelled, requested = cursor.fetchone()
    return int(cancelled), int(requested)


def insert_members(
    cursor: Any, workflow_id: int, columns: Mapping[str, Sequence[Any]], trace_context: str | None = None
) -> list[tuple[int, str, str | None]]:
    """Insert the member jobs (``columns``: one array per column of ``_INSERT_MEMBERS``), each
    storing ``trace_context`` (JSON text) when the call is traced; returns (id, type,
    unique_key) of those inserted, in order."""
    cursor.execute(_INSERT_MEMBERS, dict(columns, workflow=workflow_id, trace_context=trace_context))
    rows: list[tuple[int, str, str | None]] = cursor.fetchall()
    return rows
