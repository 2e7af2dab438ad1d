"""Schedule ticks: the row that makes a tick fire once, and what the tick did.

Every worker that runs the scheduler tries to insert the row of a due tick; the unique
(schedule, tick_at) lets one insert through and the others do nothing. The winner enqueues the
tick's job in the same transaction, so a tick has its row exactly when its job exists.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

# One statement per due check. The database decides: a tick later than now() inserts nothing
# (the worker's clock ran ahead) and is told so by the returned now; a tick already fired by
# another worker conflicts and inserts nothing; a tick found later than the schedule's grace is
# recorded as missed instead of enqueued, and one of a disabled schedule as disabled.
_CLAIM_TICK = """
WITH clock AS (SELECT now() AS now),
tick AS (
    INSERT INTO django_jobs_scheduletick (schedule, tick_at, outcome, coalesced, worker_id, created_at)
    SELECT %(schedule)s, %(tick)s,
           CASE WHEN EXISTS (SELECT 1 FROM django_jobs_schedulestate
                             WHERE name = %(schedule)s AND disabled_at IS NOT NULL) THEN 'disabled'
                WHEN %(grace)s::float8 IS NOT NULL
                     AND clock.now - %(tick)s > make_interval(secs => %(grace)s::float8)
                THEN 'missed' ELSE 'enqueued' END,
           %(coalesced)s, %(worker)s, clock.now
    FROM clock WHERE %(tick)s <= clock.now
    ON CONFLICT (schedule, tick_at) DO NOTHING
    RETURNING id, outcome
)
SELECT clock.now, tick.id, tick.outcome, statement_timestamp() FROM clock LEFT JOIN tick ON true
"""
# Where each schedule resumes: its latest tick (served by the unique index's leading columns).
_LAST_TICKS = """
SELECT now(), s.name, (SELECT max(tick_at) FROM django_jobs_scheduletick t WHERE t.schedule = s.name)
FROM unnest(%s::text[]) AS s(name)
"""
_RECORD_JOB = "UPDATE django_jobs_scheduletick SET job_id = %s, outcome = %s WHERE id = %s"
# The latest tick of each schedule stays: it is where the schedule resumes after a restart.
_PRUNE_TICKS = """
DELETE FROM django_jobs_scheduletick WHERE id IN (
    SELECT t.id FROM django_jobs_scheduletick t
    WHERE t.created_at < now() - make_interval(secs => %s)
      AND t.tick_at < (SELECT max(tick_at) FROM django_jobs_scheduletick l WHERE l.schedule = t.schedule)
    LIMIT %s
)
"""


@dataclass(frozen=True)
class ClaimedTick:
    #: The database's now() when the tick was checked.
    now: dt.datetime
    #: The tick's row when this call inserted it; None when it was not due yet or was fired.
    id: int | None
    #: "enqueued" (to be enqueued now), "missed" or "disabled", for an inserted row.
    outcome: str | None
    #: When this statement ran: a job created after it was created by this tick.
    checked_at: dt.datetime


def claim_tick(
    schedule: str, tick_at: dt.datetime, *, grace: float | None, coalesced: int, worker_id: str | None
) -> ClaimedTick:
    """Insert the row of a due tick unless another worker did; call inside a transaction that
    also enqueues the tick's job."""
    params: dict[str, Any] = {
        "schedule": schedule,
        "tick": tick_at,
        "grace": grace,
        "coalesced": coalesced,
        "worker": worker_id,
    }
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_CLAIM_TICK, params)
        now, tick_id, outcome, checked_at = cursor.fetchone()
    return ClaimedTick(now=now, id=tick_id, outcome=outcome, checked_at=checked_at)


def record_tick_job(tick_id: int, job_id: int, outcome: str) -> None:
    """Say which job a tick enqueued (or found still active, ``outcome="skipped"``)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RECORD_JOB, [job_id, outcome, tick_id])
        if cursor.rowcount != 1:
            raise RuntimeError(f"schedule tick {tick_id} vanished inside its own transaction")


def last_ticks(names: Sequence[str]) -> tuple[dt.datetime, dict[str, dt.datetime | None]]:
    """The database's now() and each schedule's latest tick (None for one that never ticked)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_LAST_TICKS, [list(names)])
        rows = cursor.fetchall()
        if not rows:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0], {}
    return rows[0][0], {name: last for _, name, last in rows}


def prune_ticks(older_than: float, limit: int) -> int:
    """Delete up to ``limit`` tick records older than ``older_than`` seconds (never the latest
    tick of a schedule)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_PRUNE_TICKS, [older_than, limit])
        return int(cursor.rowcount)


# A schedule disabled before (and enabled since) has a row already: it is disabled again in
# place. The WHERE of the upsert refuses one that is disabled now, so two operators disabling
# at once record one change, and the second learns it.
_DISABLE = """
WITH changed AS (
    INSERT INTO django_jobs_schedulestate (name, disabled_at, disabled_by, reason)
    VALUES (%(name)s, now(), %(actor)s, %(reason)s)
    ON CONFLICT (name) DO UPDATE SET disabled_at = now(), disabled_by = EXCLUDED.disabled_by,
                                     reason = EXCLUDED.reason
    WHERE django_jobs_schedulestate.disabled_at IS NULL
    RETURNING name
), events AS (
    INSERT INTO django_jobs_scheduleevent (schedule, kind, actor, reason)
    SELECT name, 'disabled', %(actor)s, %(reason)s FROM changed
)
SELECT name FROM changed
"""
_ENABLE = """
WITH changed AS (
    UPDATE django_jobs_schedulestate SET disabled_at = NULL, disabled_by = NULL, reason = NULL
    WHERE name = %(name)s AND disabled_at IS NOT NULL
    RETURNING name
), events AS (
    INSERT INTO django_jobs_scheduleevent (schedule, kind, actor, reason)
    SELECT name, 'enabled', %(actor)s, %(reason)s FROM changed
)
SELECT name FROM changed
"""
_RUN_NOW = """
INSERT INTO django_jobs_scheduleevent (schedule, kind, actor, reason, job_id)
VALUES (%s, 'run_now', %s, %s, %s)
"""


def disable(name: str, *, actor: str, reason: str) -> None:
    """Disable a schedule: its next ticks are recorded as ``disabled`` and enqueue nothing.

    Raises ``ActionRefused`` when it is disabled already."""
    _change(_DISABLE, name, actor, reason, "is disabled already")


def enable(name: str, *, actor: str, reason: str) -> None:
    """Enable a disabled schedule from its next tick on. Raises ``ActionRefused`` when it is
    not disabled."""
    _change(_ENABLE, name, actor, reason, "is not disabled")


def _change(statement: str, name: str, actor: str, reason: str, refusal: str) -> None:
    from django_jobs.transitions.operator import ActionRefused

    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(statement, {"name": name, "actor": actor, "reason": reason})
        if cursor.fetchone() is None:
            raise ActionRefused(f"schedule {name} {refusal}")


def record_run_now(name: str, *, actor: str, reason: str, job_id: int) -> None:
    """Record who ran a schedule's job out of turn, in the transaction that enqueued it."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_RUN_NOW, [name, actor, reason, job_id])
