"""Removing what self-test runs wrote: their jobs (the marker too) with their events, the keys
their effects left in the ledger, the rows of their workers.

What belongs to a run is known without a trace of its own: the jobs of the self-test's types in
its queue, whose payload names the run; the keys each of those jobs may have written
(``jobs.keys_of``, from its id and attempts); the workers' ids (``jobs.worker_id``). All of it
goes in one transaction (``transitions.removal``), so an interrupted clean-up leaves everything
for the next, never half.
"""

from __future__ import annotations

from collections.abc import Collection

from django_jobs.models import Job, ProcessedEffect
from django_jobs.selftest.jobs import KEY_PREFIX, RUN, TYPES, WORKER_NAMES, keys_of, worker_id
from django_jobs.transitions import removal
from django_jobs.transitions.removal import Removed


def _owned(queue: str, runs: Collection[str] | None) -> tuple[list[int], list[str], set[str]]:
    """The ids of the self-test's jobs in ``queue`` (of ``runs``, or of every run), the keys
    they may have written, and the runs found."""
    ids: list[int] = []
    keys: list[str] = []
    found: set[str] = set()
    rows = Job.objects.filter(queue=queue, type__in=TYPES).values_list(
        "id", "payload", "attempts", "max_attempts"
    )
    for job_id, payload, attempts, max_attempts in rows:
        run = payload.get("run") if isinstance(payload, dict) else None
        if runs is not None and run not in runs:
            continue
        ids.append(job_id)
        if isinstance(run, str):
            found.add(run)
            keys += keys_of(run, job_id, max(attempts, max_attempts))
    return ids, keys, found


def remove(queue: str, runs: Collection[str] | None = None) -> Removed:
    """Remove what ``runs`` (every run, if None) wrote in ``queue``."""
    ids, keys, found = _owned(queue, runs)
    workers = [worker_id(run, name) for run in sorted(found | set(runs or ())) for name in WORKER_NAMES]
    return removal.remove(ids=ids, queue=queue, types=TYPES, effect_keys=keys, worker_ids=workers)


def keep(queue: str, run: str) -> tuple[int, int]:
    """Keep what ``run`` wrote, all but its marker (the queue is free again, and the next run
    is told to clean up first): the jobs and the ledger keys kept, counted."""
    ids, keys, _ = _owned(queue, [run])
    markers = list(Job.objects.filter(id__in=ids, type=RUN).values_list("id", flat=True))
    removal.remove(ids=markers, queue=queue, types=[RUN], effect_keys=[], worker_ids=[])
    return len(ids) - len(markers), ProcessedEffect.objects.filter(key__in=keys).count()


def described(removed: Removed) -> str:
    return (
        f"removed {removed.jobs} job(s), {removed.events} event(s), {removed.effect_keys} ledger "
        f"key(s) and {removed.workers} live-worker row(s)"
    )


def how_to_find(queue: str, run: str) -> str:
    """Where the rows of a kept run are, and how to remove them."""
    return (
        f"the console lists its jobs (filter by queue {queue!r}); its ledger keys start "
        f"{KEY_PREFIX}{run}: — remove it all with: manage.py jobsselftest --clean --queue {queue}"
    )
