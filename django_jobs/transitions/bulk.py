"""The writes of a bulk operation (``django_jobs.bulk``) besides the jobs' own transitions
(those are ``manual_retry`` and ``operator.cancel``, fenced by what it saw):

- ``take_jobs``: the jobs it will act on, each with the status and execution seen, in one
  statement, so the operation's list is one moment's truth;
- ``lock``: the operation's row, for one batch's transaction;
- ``next_batch`` / ``record_batch``: one batch's jobs after the cursor, then what became of
  them, with the counts and the cursor, in the batch's transaction: a crash loses the whole
  batch or nothing, and the next run starts after the last one that committed;
- ``finish`` / ``stop``: the operation's end, a compare-and-set on its state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models.functions import Now

from django_jobs.conf import jobs_settings
from django_jobs.models import BulkOperation, BulkOperationJob, BulkState, Job

# The jobs' rows read under the operation's row lock: nothing else writes the items.
_TAKE = """
INSERT INTO django_jobs_bulkoperationjob
    (operation_id, job_id, seen_status, seen_execution, seen_manual_retries)
SELECT %s, taken.id, taken.status, taken.execution_id, taken.manual_retries FROM ({jobs}) AS taken
"""


def take_jobs(operation_id: int, jobs: Any, limit: int) -> int:
    """Record the jobs of ``jobs`` (a queryset of ``Job``), at most ``limit``, as those the
    operation acts on; returns how many."""
    query = jobs.order_by("id").values("id", "status", "execution_id", "manual_retries")[:limit]
    sql, params = query.query.sql_with_params()
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_TAKE.format(jobs=sql), (operation_id, *params))
        return int(cursor.rowcount)


@dataclass(frozen=True)
class Taken:
    job_id: int
    status: str
    execution_id: Any
    manual_retries: int


def lock(operation_id: int, idle_limit: int) -> BulkOperation | None:
    """The operation's row, locked until the caller's transaction ends (None if no operation
    has the id). A process frozen while it holds the lock has its session ended by PostgreSQL
    once it has been idle in the transaction for ``idle_limit`` seconds: the lock is freed for
    whoever took over its job."""
    alias = jobs_settings.DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, true)", [f"{idle_limit}s"]
        )
    return BulkOperation.objects.using(alias).select_for_update().filter(id=operation_id).first()


def next_batch(operation_id: int, after: int, size: int) -> list[Taken]:
    """The next ``size`` jobs of the operation after job id ``after``, in id order."""
    rows = (
        BulkOperationJob.objects.using(jobs_settings.DATABASE)
        .filter(operation_id=operation_id, job_id__gt=after)
        .order_by("job_id")
        .values_list("job_id", "seen_status", "seen_execution", "seen_manual_retries")[:size]
    )
    return [Taken(*row) for row in rows]


_RECORD = """
WITH marks AS (
    UPDATE django_jobs_bulkoperationjob o SET outcome = m.outcome, detail = m.detail
    FROM unnest(%(jobs)s::bigint[], %(outcomes)s::text[], %(details)s::text[]) AS m(job_id, outcome, detail)
    WHERE o.operation_id = %(operation)s AND o.job_id = m.job_id AND o.outcome IS NULL
    RETURNING o.outcome
)
UPDATE django_jobs_bulkoperation SET
    done = done + (SELECT count(*) FROM marks WHERE outcome = 'done'),
    skipped = skipped + (SELECT count(*) FROM marks WHERE outcome <> 'done'),
    last_job_id = %(last)s
WHERE id = %(operation)s AND state = 'running' AND last_job_id < %(last)s
RETURNING done, skipped
"""


def record_batch(operation_id: int, outcomes: dict[int, tuple[str, str | None]]) -> tuple[int, int] | None:
    """Write what became of a batch's jobs (by id: the outcome, and why a skipped one was, or
    None), add them to the counts and move the cursor past them; returns the counts (done,
    skipped), or None when the operation is no longer running or another run recorded the batch
    already (then the caller's transaction must roll back)."""
    jobs = sorted(outcomes)
    params: dict[str, Any] = {
        "operation": operation_id,
        "jobs": jobs,
        "outcomes": [outcomes[job][0] for job in jobs],
        "details": [outcomes[job][1] for job in jobs],
        "last": jobs[-1],
    }
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RECORD, params)
        row = cursor.fetchone()
    return (int(row[0]), int(row[1])) if row else None


def finish(operation_id: int) -> bool:
    """Mark a running operation done once no job is left; False if it was not running."""
    changed = (
        BulkOperation.objects.using(jobs_settings.DATABASE)
        .filter(id=operation_id, state=BulkState.RUNNING)
        .update(state=BulkState.DONE, finished_at=Now())
    )
    return changed == 1


def stop(operation_id: int, *, actor: str, reason: str) -> bool:
    """Stop a running operation: no batch starts after this commits. False if it had ended."""
    changed = (
        BulkOperation.objects.using(jobs_settings.DATABASE)
        .filter(id=operation_id, state=BulkState.RUNNING)
        .update(state=BulkState.CANCELLED, finished_at=Now(), cancelled_by=actor, cancel_reason=reason)
    )
    return changed == 1


def existing(job_ids: list[int]) -> set[int]:
    """Which of these jobs still exist (retention may have pruned some)."""
    return set(Job.objects.using(jobs_settings.DATABASE).filter(id__in=job_ids).values_list("id", flat=True))
