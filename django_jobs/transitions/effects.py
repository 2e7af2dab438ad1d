"""The record of a side effect that happened: one key per effect, inserted at most once.

``django_jobs.effects.once`` runs this in the transaction of the effect itself, so the key and
the effect commit or roll back together.
"""

from __future__ import annotations

from typing import Any

#: Record an effect's key; a row back means this is its first time, none that it was done.
RECORD_EFFECT = (
    "INSERT INTO django_jobs_processedeffect (key, job_id) VALUES (%s, %s)"
    " ON CONFLICT (key) DO NOTHING RETURNING key"
)


def record_effect(cursor: Any, key: str, job_id: int | None) -> bool:
    """Record ``key`` (of the effect ``job_id`` produces); whether it was not recorded before.
    A concurrent transaction recording the same key makes this one wait for its end."""
    cursor.execute(RECORD_EFFECT, [key, job_id])
    return cursor.fetchone() is not None
