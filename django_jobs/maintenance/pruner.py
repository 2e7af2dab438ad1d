"""The pruner: deletes what is no longer needed (Oban's Pruner), and keeps the limits' rows tidy.

Each function is one step of a reaper pass (:mod:`~django_jobs.maintenance.reaper` runs them in
turn, each isolated from the others' failures):

- :func:`run_once` (retention): deletes finished jobs, with their events, older than their
  status's retention, in batches (oldest first, each from where the one before stopped), until
  each status is caught up or the pass's time budget is spent; then workflows, whole, once
  every job of one has ended and is past its status's retention (a workflow with a failed job
  is kept as long as failed jobs are: for ever by default), walking them in id order;
- :func:`forget_silent_workers`: removes the rows of workers that have not reported for a day
  (killed without a chance to say so);
- :func:`tidy_limits`: deletes the rows of concurrency keys that have no running job, and
  creates the rate windows of the types this process knows if they went missing;
- :func:`prune_ticks`: deletes the records of schedule ticks past their retention.

Options (read at each pass):

- ``RETENTION`` (completed and skipped 7 days, cancelled 30 days, failed None): seconds a
  finished job is kept, per status; None keeps that status for ever;
- ``REAPER_INTERVAL`` (30 s): retention's time budget is half of it, unless ``budget`` says;
- ``SCHEDULE_TICK_RETENTION`` (30 days): how long a tick's record is kept;
- ``DATABASE``: the connection.

Defaults: :data:`~django_jobs.maintenance.service.BATCH` (500) rows per statement; key tidying
and tick pruning stop after ten batches a pass; a worker is forgotten after a day of silence.

Caveats: the budget is time, not a count: workers finishing thousands of jobs a second finish
millions between two passes, and a fixed count per pass would let the table grow for ever. A
retention pass that spent its budget with jobs still due says so (``behind``), and the reaper
loop then goes on at once. Each schedule's latest tick is always kept: the scheduler resumes
from it. Logs under ``django_jobs.reaper``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import NamedTuple

from django.db.models.functions import Now

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.maintenance.service import BATCH
from django_jobs.models import LiveWorker
from django_jobs.registry import registry

logger = logging.getLogger("django_jobs.reaper")


class Retention(NamedTuple):
    """What a retention pass did."""

    #: Jobs deleted, by status.
    pruned: dict[str, int]
    #: The budget ran out while more jobs were due: the next pass should come at once.
    behind: bool


def prune(limit_per_status: int | None = None, budget: float | None = None) -> dict[str, int]:
    """Delete finished jobs older than their status's retention, in batches, until each status
    is caught up, ``limit_per_status`` jobs were deleted, or ``budget`` seconds were spent
    (default: half of ``REAPER_INTERVAL``); return the counts by status."""
    return run_once(limit_per_status, budget).pruned


def run_once(limit_per_status: int | None = None, budget: float | None = None) -> Retention:
    """One retention pass, as :func:`prune`; says too whether the budget ran out while more
    jobs were due (never with ``limit_per_status``: that pass stopped where it was told to)."""
    behind = False
    counts: dict[str, int] = {}
    ends = time.monotonic() + (jobs_settings.REAPER_INTERVAL / 2 if budget is None else budget)
    for status, keep in jobs_settings.RETENTION.items():
        if keep is None:
            continue
        total = 0
        since = None  # each batch starts where the one before it stopped
        while limit_per_status is None or total < limit_per_status:
            batch = BATCH if limit_per_status is None else min(BATCH, limit_per_status - total)
            deleted, until = transitions.prune(status, keep, batch, since)
            total += deleted
            since = until or since
            if deleted < batch:
                break
            if time.monotonic() >= ends:
                behind = limit_per_status is None
                break
        if total:
            counts[status] = total
            more = "; more are due" if behind else ""
            logger.info("pruned %s %s job(s) older than %ss%s", total, status, keep, more)
    if not behind and limit_per_status is None:
        behind = _prune_workflows(counts, ends)
    return Retention(counts, behind)


#: Where the next pass's look at workflows starts: passes walk the workflows in id order, a
#: window each, and start again from the first once they reached the last.
_next_workflow = 0


def _prune_workflows(counts: dict[str, int], ends: float) -> bool:
    """Prune workflows whole (``transitions.prune_workflows``) until the walk reached the last
    workflow or the budget ran out; adds their jobs to ``counts``. True when the budget ran out
    while this pass was pruning some (more are likely due)."""
    global _next_workflow
    workflows = 0
    jobs: dict[str, int] = {}
    while True:
        batch = transitions.prune_workflows(dict(jobs_settings.RETENTION), _next_workflow, BATCH // 10)
        workflows += batch.workflows
        for status, count in batch.jobs.items():
            jobs[status] = jobs.get(status, 0) + count
        if batch.next_after is None:
            _next_workflow = 0
            behind = False
            break
        _next_workflow = batch.next_after
        if time.monotonic() >= ends:
            # More are due only if this walk found some: a walk over workflows kept for ever
            # goes on at the next pass, not at once.
            behind = workflows > 0
            break
    for status, count in jobs.items():
        counts[status] = counts.get(status, 0) + count
    if workflows:
        logger.info("pruned %s workflow(s) whole, with their %s job(s)", workflows, sum(jobs.values()))
    return behind


def forget_silent_workers() -> int:
    """Remove workers that have not reported for a day (killed without a chance to say so)."""
    workers = LiveWorker.objects.using(jobs_settings.DATABASE)
    return workers.filter(last_seen_at__lt=Now() - dt.timedelta(days=1)).delete()[0]


def tidy_limits(limit: int = 10 * BATCH) -> int:
    """Forget idle concurrency keys (at most ``limit``) and recreate missing rate windows."""
    transitions.open_rate_windows(sorted(t.name for t in registry.all() if t.rate_limit))
    forgotten = 0
    while forgotten < limit:
        deleted = transitions.forget_idle_keys(min(BATCH, limit - forgotten))
        forgotten += deleted
        if deleted < BATCH:
            break
    return forgotten


def prune_ticks(limit: int = 10 * BATCH) -> int:
    """Delete the records of schedule ticks older than ``SCHEDULE_TICK_RETENTION`` (at most
    ``limit``), always keeping each schedule's latest tick: the scheduler resumes from it."""
    pruned = 0
    while pruned < limit:
        deleted = transitions.prune_ticks(jobs_settings.SCHEDULE_TICK_RETENTION, min(BATCH, limit - pruned))
        pruned += deleted
        if deleted < BATCH:
            break
    if pruned:
        logger.info("pruned %s schedule tick record(s)", pruned)
    return pruned
