"""What the self-test removes when it is done: its jobs with their events, its effect keys.

Retention (``recovery.prune``) is the only other statement that deletes jobs, and it deletes
by age; these delete by name, and only what the caller names *and* the guard allows: a job is
removed only if it is one of ``ids``, in ``queue``, and of one of ``types``, so a wrong id can
never reach another queue's work. The self-test's jobs are in no workflow and mark no external
call: their events are all that hangs on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from django.db import connections, transaction

from django_jobs.conf import jobs_settings

# Events first, in the same statement: their foreign key is checked at commit.
_REMOVE_JOBS = """
WITH doomed AS (
    SELECT id FROM django_jobs_job
    WHERE id = ANY(%(ids)s) AND queue = %(queue)s AND type = ANY(%(types)s)
    FOR UPDATE
), events AS (
    DELETE FROM django_jobs_jobevent WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), removed AS (
    DELETE FROM django_jobs_job WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM removed), (SELECT count(*) FROM events)
"""
# By the primary key, never by a pattern: a LIKE on the key would read the whole ledger
# (its index is in the database's collation), and the ledger is the users' too.
_FORGET_EFFECTS = "DELETE FROM django_jobs_processedeffect WHERE key = ANY(%s)"
_FORGET_WORKERS = "DELETE FROM django_jobs_liveworker WHERE worker_id = ANY(%s)"


class Removed(NamedTuple):
    """What one removal deleted."""

    jobs: int
    events: int
    effect_keys: int
    workers: int


def remove(
    *,
    ids: Sequence[int],
    queue: str,
    types: Sequence[str],
    effect_keys: Sequence[str],
    worker_ids: Sequence[str],
) -> Removed:
    """Delete, in one transaction, the jobs among ``ids`` that are in ``queue`` and of one of
    ``types`` (with their events), the effect keys ``effect_keys`` and the live-worker rows
    ``worker_ids``: all of it, or nothing."""
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_REMOVE_JOBS, {"ids": list(ids), "queue": queue, "types": list(types)})
        jobs, events = cursor.fetchone()
        cursor.execute(_FORGET_EFFECTS, [list(effect_keys)])
        keys = cursor.rowcount
        cursor.execute(_FORGET_WORKERS, [list(worker_ids)])
        workers = cursor.rowcount
    return Removed(int(jobs), int(events), keys, workers)
