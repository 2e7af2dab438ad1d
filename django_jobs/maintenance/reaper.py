"""The reaper: one pass of maintenance, step by step, and the thread that repeats it.

A pass (:func:`run_once`) runs, in order:

1. recovery (:mod:`~django_jobs.maintenance.rescuer`): takes back running jobs whose lease
   expired, as :func:`django_jobs.decision.decide` says for each; then expiry
   (:func:`expire`): ends the pending jobs past their start-by deadline (``cancelled``, code
   ``EXPIRED``), so that they do not linger until a worker claims them;
2. retention (:func:`django_jobs.maintenance.pruner.run_once`): deletes finished jobs past
   their status's retention, within a time budget;
3. housekeeping (:data:`HOUSEKEEPING`), each step isolated: a failing step is logged and named
   in ``ReapResult.failed_steps``, and the steps after it still run: forgetting silent workers,
   tidying the rows of start limits, pruning schedule ticks (:mod:`~django_jobs.maintenance.
   pruner`), and writing the admin log entries that console actions still owe
   (:func:`django_jobs.console.audit.deliver_pending`).

Options: ``REAPER_INTERVAL`` (30 s): seconds between passes of :class:`ReaperLoop`, ±20 % so
that the reapers of many workers do not fire in step; the settings of each step are listed in
its module. ``runjobs`` runs the loop (after one pass at start); ``reapjobs`` runs one pass, or
the loop with ``--loop``, and ``reapjobs --json`` reports each recovery.

Caveats: safe in many processes at once (SKIP LOCKED, guarded updates); database time only. An
unreachable database ends the pass (nothing else could run either); the loop logs it and tries
again an interval later. Retention that ran out of time with jobs still due makes the loop go on
at once. Logs under ``django_jobs.reaper``.

The names of the steps are importable from here too (``reaper.recover``, ``reaper.prune``, …),
as they were before each had a module of its own.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.maintenance import pruner, rescuer
from django_jobs.maintenance.pruner import forget_silent_workers, prune, prune_ticks, tidy_limits
from django_jobs.maintenance.rescuer import Recovered, decide_recovery, recover, recover_jobs
from django_jobs.maintenance.service import BATCH, Service

__all__ = [
    "BATCH",
    "HOUSEKEEPING",
    "ReapResult",
    "ReaperLoop",
    "Recovered",
    "decide_recovery",
    "expire",
    "forget_silent_workers",
    "prune",
    "prune_ticks",
    "recover",
    "recover_jobs",
    "run_once",
    "tidy_limits",
]

logger = logging.getLogger("django_jobs.reaper")


@dataclass
class ReapResult:
    """What one pass did."""

    recovered: dict[str, int] = field(default_factory=dict)  # status → count
    pruned: dict[str, int] = field(default_factory=dict)  # status → count
    #: Each job recovered, in the order of the recoveries.
    jobs: list[Recovered] = field(default_factory=list)
    #: Retention spent its time budget with more jobs due: the next pass should come at once.
    retention_behind: bool = False
    #: The housekeeping steps that failed this pass (each is logged with its error).
    failed_steps: list[str] = field(default_factory=list)
    #: (type, queue) of each pending job ended past its start-by deadline.
    expired: list[tuple[str, str]] = field(default_factory=list)

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
        if self.expired:  # jobs past their start-by deadline ended (absent when none)
            report["expired"] = len(self.expired)
        if self.failed_steps:
            report["failed_steps"] = list(self.failed_steps)
        return report


#: What each pass does after recovery and retention, in order.
HOUSEKEEPING: tuple[Callable[[], int], ...] = (
    forget_silent_workers,
    tidy_limits,
    prune_ticks,
    consolelog.deliver_pending,
)


def run_once() -> ReapResult:
    """One pass: recover expired leases, then apply retention; says what it did."""
    jobs = rescuer.run_once()
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.status] = counts.get(job.status, 0) + 1
    expired = expire()
    pruned, behind = pruner.run_once()
    result = ReapResult(recovered=counts, pruned=pruned, jobs=jobs, retention_behind=behind, expired=expired)
    for step in HOUSEKEEPING:
        if not _run_step(step):
            result.failed_steps.append(step.__name__)
    return result


def expire(batch: int = BATCH, max_batches: int = 20) -> list[tuple[str, str]]:
    """End the pending jobs past their start-by deadline, ``batch`` at a time, at most
    ``max_batches`` batches a pass (the next pass goes on); returns (type, queue) of each."""
    ended: list[tuple[str, str]] = []
    for _ in range(max_batches):
        rows = transitions.expire_pending(batch)
        ended += [(job_type, queue) for _, job_type, queue in rows]
        if rows:
            logger.info("expired %d pending job(s) past their start-by deadline", len(rows))
        if len(rows) < batch:
            break
    return ended


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


class ReaperLoop(Service[ReapResult]):
    """Runs :func:`run_once` every ``REAPER_INTERVAL`` (±20 %, so that the reapers of many
    workers do not fire in step) until ``stop`` is set. Survives database outages."""

    logger: ClassVar[logging.Logger] = logger
    outage_message: ClassVar[str] = "reaper pass failed, retrying next interval: %s"
    failure_message: ClassVar[str] = "reaper pass failed, retrying next interval"

    def __init__(
        self,
        stop: threading.Event,
        interval: float | None = None,
        on_pass: Callable[[ReapResult], None] | None = None,
    ) -> None:
        super().__init__("django_jobs-reaper", stop)
        self._interval = interval
        #: Told what each pass did (``reapjobs --loop --json`` prints it).
        self._on_pass = on_pass
        self._behind = False

    def run_once(self) -> ReapResult:
        return run_once()

    def next_wait(self) -> float:
        interval = self._interval or jobs_settings.REAPER_INTERVAL
        # Retention that fell behind goes on at once: the table must not grow for ever when
        # jobs finish faster than one pass per interval prunes them.
        return 0.0 if self._behind else interval * random.uniform(0.8, 1.2)

    def run_now(self) -> bool:
        """One pass, on the calling thread; a failure is logged, never raised."""
        self._behind = False  # a failed pass waits a whole interval before the next
        return super().run_now()

    def _passed(self, result: ReapResult) -> None:
        self._behind = result.retention_behind
        super()._passed(result)
        if self._on_pass is not None:
            self._on_pass(result)
