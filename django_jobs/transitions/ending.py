"""What the row of a running execution tells :func:`django_jobs.decision.decide`, for a writer
that must decide again without the execution's claim at hand (an outcome the database refused).

It is read from the row, as the reaper reads it: the type's policies as stored on the job, the
cancel request as it stands now, and whether the execution marked an external call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import connections

from django_jobs.conf import jobs_settings

# FOR UPDATE: the caller writes the outcome in the same transaction, so a cancel request cannot
# arrive between what was read here and the write (it waits, and then finds the job ended).
_RUNNING = """
SELECT j.attempts + (j.started_at IS NULL)::int, j.max_attempts, j.on_lost, j.on_lost_in_call,
       j.cancel_requested_at IS NOT NULL, j.last_error_code,
       EXISTS (SELECT 1 FROM django_jobs_externalcall c
               WHERE c.job_id = j.id AND c.execution_id = j.execution_id)
FROM django_jobs_job j
WHERE j.id = %s AND j.execution_id = %s AND j.status = 'running'
FOR UPDATE
"""


@dataclass(frozen=True, slots=True)
class Running:
    """A running execution, as its job's row describes it."""

    #: The number of this execution (its start counted, or about to be).
    attempt: int
    max_attempts: int
    on_lost: str
    #: None for a type that marks no external calls (see ``Job.on_lost_in_call``).
    on_lost_in_call: str | None
    cancel_requested: bool
    last_error_code: str | None
    #: Whether this execution committed a mark of an external call.
    marked_call: bool


def lock_running(job_id: int, execution_id: uuid.UUID) -> Running | None:
    """Lock job ``job_id``'s row and describe its execution ``execution_id``; None when that
    execution no longer owns the job (its lease was taken over). Call it in a transaction: the
    lock lasts until the transaction ends."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RUNNING, [job_id, execution_id])
        row = cursor.fetchone()
    return None if row is None else Running(*row)
