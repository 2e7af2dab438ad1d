"""What operators do to queues: pause and resume. Each is recorded with its actor and reason,
and notifies every worker at commit (the triggers of migration 0006)."""

from __future__ import annotations

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.transitions.operator import ActionRefused

# A queue paused before (and resumed since) has a row already: it is paused again in place.
# The WHERE of the upsert refuses a queue that is paused now, so two operators pausing at once
# record one pause, and the second learns it.
_PAUSE = """
WITH paused AS (
    INSERT INTO django_jobs_queue_state (name, paused_at, paused_by, reason)
    VALUES (%(name)s, now(), %(actor)s, %(reason)s)
    ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_by = EXCLUDED.paused_by,
                                     reason = EXCLUDED.reason
    WHERE django_jobs_queue_state.paused_at IS NULL
    RETURNING name
), events AS (
    INSERT INTO django_jobs_queueevent (queue, kind, actor, reason)
    SELECT name, 'paused', %(actor)s, %(reason)s FROM paused
)
SELECT name FROM paused
"""
# The row stays (paused_at NULL): the queue's history is in its events.
_RESUME = """
WITH resumed AS (
    UPDATE django_jobs_queue_state SET paused_at = NULL, paused_by = NULL, reason = NULL
    WHERE name = %(name)s AND paused_at IS NOT NULL
    RETURNING name
), events AS (
    INSERT INTO django_jobs_queueevent (queue, kind, actor, reason)
    SELECT name, 'resumed', %(actor)s, %(reason)s FROM resumed
)
SELECT name FROM resumed
"""


def pause(name: str, *, actor: str, reason: str) -> None:
    """Pause a queue: workers claim none of its jobs until it is resumed.

    Raises ``ActionRefused`` if the queue is paused already. The caller validates the name.
    """
    if not _write(_PAUSE, name, actor, reason):
        raise ActionRefused(f"queue {name!r} is paused already")


def resume(name: str, *, actor: str, reason: str) -> None:
    """Resume a paused queue. Raises ``ActionRefused`` if it is not paused."""
    if not _write(_RESUME, name, actor, reason):
        raise ActionRefused(f"queue {name!r} is not paused")


def _write(sql: str, name: str, actor: str, reason: str) -> bool:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(sql, {"name": name, "actor": actor, "reason": reason})
        return cursor.fetchone() is not None
