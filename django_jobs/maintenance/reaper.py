"""The reaper: takes back running jobs whose lease expired, and prunes old finished jobs.

A lease expires when an execution stops proving itself alive: its worker was killed, froze
(SIGSTOP, a long GC pause, a hung call that starves the heartbeat) or lost the database for
longer than the lease. The reaper then asks :func:`django_jobs.decision.decide`, per job:

- ``pending`` (retried after the type's backoff) while attempts remain;
- ``failed`` when the lost execution was the last attempt;
- ``needs_review`` when the job's stored ``on_lost`` is ``"needs_review"``: its side effect is
  irreversible and not idempotent, so only a human may decide to run it again;
- for a type that marks its external calls (``@job(external_calls=...)``), the marks decide
  instead of ``on_lost``: an execution lost before any mark never reached the provider and is
  retried (code ``LOST_BEFORE_CALL``); one lost after a mark goes to ``needs_review``, or back to
  ``pending`` with code ``LEASE_LOST`` so that the next execution reconciles first (a type
  with ``reconcile``);
- ``cancelled`` when an operator asked to cancel it;
- ``pending`` at once and uncounted when the execution was prefetched and its start was never
  recorded (its worker died with the job still waiting in its buffer).

It also keeps the bookkeeping of start limits tidy: it deletes the rows of concurrency keys
that have no running job, and creates the rate windows of the types its process knows if they
went missing.

It clears the owner fields and records a ``recovered`` event with the lost execution's id, and
sends ``job_finished`` for it. It is safe in many processes at once (SKIP LOCKED, guarded
updates) and uses database time only. ``runjobs`` runs it every ``REAPER_INTERVAL``;
``reapjobs`` runs it on its own, and ``reapjobs --json`` reports each recovery.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models.functions import Now

from django_jobs import logs, signals, transitions
from django_jobs.backoff import Random
from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.decision import Happened, Situation, decide
from django_jobs.errors import AMBIGUOUS_CODES, DATABASE_UNAVAILABLE, ErrorCode
from django_jobs.models import Job, LiveWorker
from django_jobs.registry import registry, retry_policy
from django_jobs.runtime import connectivity
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Expired, Recovery

logger = logging.getLogger("django_jobs.reaper")

#: Rows per statement: bounded, so a mass recovery (a whole fleet died) never holds long locks.
BATCH = 500


@dataclass(frozen=True)
class Recovered:
    """What the reaper did to one job, for the audit of recoveries (``reapjobs --json``)."""

    id: int
    type: str
    lost_execution: str
    worker: str | None
    #: The status the job was moved to.
    status: str
    #: The job's attempts after the recovery.
    attempts: int
    max_attempts: int
    error_code: str
    #: Why, in words: which execution was lost, and why it goes where it goes.
    why: str
    #: Seconds before a job sent back to pending may run again.
    retry_in: float | None = None
    #: The external call the lost execution had marked, if it had.
    marked_call: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ReapResult:
    recovered: dict[str, int] = field(default_factory=dict)  # status → count
    pruned: dict[str, int] = field(default_factory=dict)  # status → count
    #: Each job recovered, in the order of the recoveries.
    jobs: list[Recovered] = field(default_factory=list)
    #: Retention spent its time budget with more jobs due: the next pass should come at once.
    retention_behind: bool = False
    #: The housekeeping steps that failed this pass (each is logged with its error).
    failed_steps: list[str] = field(default_factory=list)

    @property
    def total_recovered(self) -> int:
        return sum(self.recovered.values())

    def as_dict(self) -> dict[str, Any]:
        """The pass as plain JSON values: counts, and each recovery job by job."""
        report: dict[str, Any] = {
            "recovered": [job.as_dict() for job in self.jobs],
            "recovered_by_status": dict(sorted(self.recovered.items())),
            "pruned": dict(sorted(self.pruned.items())),
        }
        if self.failed_steps:
            report["failed_steps"] = list(self.failed_steps)
        return report


def decide_recovery(expired: Expired, rng: Random = random.random) -> Recovery:
    """Where a job whose execution was lost goes next, by :func:`django_jobs.decision.decide`.

    The safety policy comes from the job row, so a reaper in a process that does not know the
    type decides as the type's own workers would; the registry only lends the backoff.
    """
    # A prefetched execution whose start was never recorded is treated as never started.
    attempt = expired.attempts if expired.started else expired.attempts + 1
    happened = Happened.LOST if expired.started else Happened.NOT_STARTED
    marks = expired.on_lost_in_call is not None
    situation = Situation(
        happened, attempt, expired.max_attempts, expired.on_lost, expired.cancel_requested,
        previous_error_code=expired.last_error_code, on_lost_in_call=expired.on_lost_in_call,
        marked_call=expired.marked_call is not None,
    )  # fmt: skip
    decision = decide(situation, lambda: retry_policy(expired.type), rng)
    lost = f"execution {expired.execution_id} on worker {expired.worker_id} stopped renewing its lease"
    if not expired.started:
        lost += " before its start was recorded"
    elif marks and expired.marked_call is not None:
        lost += f" after it marked external call {expired.marked_call!r}"
    elif marks:
        lost += " before it marked any external call: it never reached the provider"
    if decision.reason:
        lost += f" ({decision.reason.replace('_', ' ')})"
    return Recovery(
        expired,
        decision.status,
        event=EventKind.RECOVERED,
        attempts=attempt if decision.counted else attempt - 1,
        error_code=_lost_code(expired),
        delay=decision.delay,
        reason=lost,
    )


def _lost_code(expired: Expired) -> str:
    """The error code a lost execution leaves: ambiguous (``LEASE_LOST``: the next execution
    of a type with ``reconcile`` asks first) unless nothing it could have done is in doubt."""
    if not expired.started:
        return ErrorCode.LOST_UNSTARTED
    # No mark: the provider never saw this execution. Unless the previous ending was ambiguous
    # itself, and this execution may have been lost while reconciling it: the doubt is still
    # there, and the next execution must reconcile again.
    unmarked = expired.on_lost_in_call is not None and expired.marked_call is None
    if unmarked and expired.last_error_code not in AMBIGUOUS_CODES:
        return ErrorCode.LOST_BEFORE_CALL
    return ErrorCode.LEASE_LOST


def recover(limit: int | None = None) -> dict[str, int]:
    """Recover every expired lease (or at most ``limit``); return counts by new status."""
    counts: dict[str, int] = {}
    for job in recover_jobs(limit):
        counts[job.status] = counts.get(job.status, 0) + 1
    return counts


def recover_jobs(limit: int | None = None) -> list[Recovered]:
    """Recover every expired lease (or at most ``limit``); return what was done, job by job."""
    recovered: list[Recovered] = []
    remaining = limit
    while remaining is None or remaining > 0:
        batch = BATCH if remaining is None else min(BATCH, remaining)
        done = transitions.recover_expired(decide_recovery, batch)
        for recovery in done:
            logger.warning(
                "job recovered id=%s type=%s lost_execution=%s worker=%s attempt=%s/%s → %s",
                recovery.expired.id, recovery.expired.type, recovery.expired.execution_id,
                recovery.expired.worker_id, recovery.attempts, recovery.expired.max_attempts,
                recovery.status, extra=_recovery_fields(recovery.expired),
            )  # fmt: skip
        _announce(done)
        recovered += [_recovered(r) for r in done]
        if remaining is not None:
            remaining -= len(done)
        if len(done) < batch:
            break
    return recovered


def _recovery_fields(expired: Expired) -> dict[str, object]:
    """The fields of the lost execution: its attempt, its execution id, the worker that lost it."""
    attempt = expired.attempts if expired.started else expired.attempts + 1
    return logs.job_fields(
        expired.id, expired.type, expired.queue, attempt, expired.execution_id, expired.worker_id
    )


def _recovered(recovery: Recovery) -> Recovered:
    expired = recovery.expired
    return Recovered(
        id=expired.id,
        type=expired.type,
        lost_execution=str(expired.execution_id),
        worker=expired.worker_id,
        status=str(recovery.status),
        attempts=recovery.attempts,
        max_attempts=expired.max_attempts,
        error_code=recovery.error_code,
        why=recovery.reason,
        retry_in=round(recovery.delay, 3) if recovery.status == JobStatus.PENDING else None,
        marked_call=expired.marked_call,
    )


def _announce(done: list[Recovery]) -> None:
    """``job_finished`` for each execution taken back: the reaper recorded its end."""
    if not done or not signals.listened(signals.job_finished):
        return
    for recovery in done:
        expired = recovery.expired
        signals.after_commit(
            jobs_settings.DATABASE,
            functools.partial(
                signals.send, signals.job_finished, Job, job_id=expired.id, type=expired.type,
                queue=expired.queue, status=str(recovery.status),
                attempt=expired.attempts if expired.started else expired.attempts + 1,
                execution_id=expired.execution_id,
                worker_id=expired.worker_id, duration=None, error_code=recovery.error_code,
                error=recovery.reason,
            ),
        )  # fmt: skip


def prune(limit_per_status: int | None = None, budget: float | None = None) -> dict[str, int]:
    """Delete finished jobs older than their status's retention, in batches, until each status
    is caught up, ``limit_per_status`` jobs were deleted, or ``budget`` seconds were spent
    (default: half of ``REAPER_INTERVAL``).

    The budget is time, not a count: workers finishing thousands of jobs a second finish
    millions between two passes, and a fixed count per pass would let the table grow for ever.
    """
    return _prune(limit_per_status, budget)[0]


def _prune(limit_per_status: int | None, budget: float | None) -> tuple[dict[str, int], bool]:
    """:func:`prune`, and whether the budget ran out while more jobs were due."""
    behind = False
    counts: dict[str, int] = {}
    ends = time.monotonic() + (jobs_settings.REAPER_INTERVAL / 2 if budget is None else budget)
    for status, keep in jobs_settings.RETENTION.items():
        if keep is None:
            continue
        total = 0
        while limit_per_status is None or total < limit_per_status:
            batch = BATCH if limit_per_status is None else min(BATCH, limit_per_status - total)
            deleted = transitions.prune(status, keep, batch)
            total += deleted
            if deleted < batch:
                break
            if time.monotonic() >= ends:
                behind = limit_per_status is None
                break
        if total:
            counts[status] = total
            more = "; more are due" if behind else ""
            logger.info("pruned %s %s job(s) older than %ss%s", total, status, keep, more)
    return counts, behind


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


#: What each pass does after recovery and retention, in order.
HOUSEKEEPING: tuple[Callable[[], int], ...] = (
    forget_silent_workers,
    tidy_limits,
    prune_ticks,
    consolelog.deliver_pending,
)


def run_once() -> ReapResult:
    """One pass: recover expired leases, then apply retention; says what it did."""
    jobs = recover_jobs()
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    pruned, behind = _prune(None, None)
    result = ReapResult(recovered=counts, pruned=pruned, jobs=jobs, retention_behind=behind)
    for step in HOUSEKEEPING:
        if not _run_step(step):
            result.failed_steps.append(step.__name__)
    return result


def _run_step(step: Callable[[], int]) -> bool:
    """Run one housekeeping step; whether it succeeded. A failure is logged with its step and
    error and does not keep the other steps from running; an unreachable database ends the
    pass, as nothing else could run either."""
    try:
        step()
    except DATABASE_UNAVAILABLE:
        raise
    except Exception:
        logger.exception("reaper step %s failed; the next pass tries again", step.__name__)
        return False
    return True


class ReaperLoop(threading.Thread):
    """Runs :func:`run_once` every ``REAPER_INTERVAL`` (±20 %, so that the reapers of many
    workers do not fire in step) until ``stop`` is set. Survives database outages."""

    def __init__(
        self,
        stop: threading.Event,
        interval: float | None = None,
        on_pass: Callable[[ReapResult], None] | None = None,
    ) -> None:
        super().__init__(name="django_jobs-reaper", daemon=True)
        self._stop_event = stop
        self._interval = interval
        #: Told what each pass did (``reapjobs --loop --json`` prints it).
        self._on_pass = on_pass
        self.passes = 0
        self._behind = False

    def run(self) -> None:
        connectivity.run_worker_statements()
        try:
            while True:
                interval = self._interval or jobs_settings.REAPER_INTERVAL
                # Retention that fell behind goes on at once: the table must not grow for
                # ever when jobs finish faster than one pass per interval prunes them.
                wait = 0.0 if self._behind else interval * random.uniform(0.8, 1.2)
                if self._stop_event.wait(wait):
                    return
                self.run_now()
        finally:
            connections.close_all()

    def run_now(self) -> None:
        """One pass, on the calling thread; a failure is logged, never raised."""
        self._behind = False  # a failed pass waits a whole interval before the next
        try:
            result = run_once()
            self._behind = result.retention_behind
            self.passes += 1
            if self._on_pass is not None:
                self._on_pass(result)
        except DATABASE_UNAVAILABLE as exc:
            logger.warning("reaper pass failed, retrying next interval: %s", type(exc).__name__)
            connections[jobs_settings.DATABASE].close()
        except Exception:
            logger.exception("reaper pass failed, retrying next interval")
