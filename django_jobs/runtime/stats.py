"""What a worker did: counts and claim timings (:class:`WorkerStats`, for the exit summary and
the benchmark), and the summary a busy worker logs every ``SUMMARY_INTERVAL``."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_jobs import logs

if TYPE_CHECKING:
    from django_jobs.transitions.positions import ClaimPositions

logger = logging.getLogger("django_jobs.worker")

#: A busy worker logs what it did this often (seconds).
SUMMARY_INTERVAL = 60.0
#: Outcome statuses as the summaries name them: a job back to pending was retried.
_OUTCOME_NAMES = {"pending": "retried", "needs_review": "parked for review"}
#: Statuses that end a job: an execution that wrote one of these finished its job.
_FINAL = ("completed", "failed", "skipped", "cancelled", "needs_review")
_SUMMARY_ORDER = ("completed", "pending", "failed", "needs_review", "skipped", "cancelled")
#: How many of the last claims' durations the percentiles are taken from.
CLAIMS_TIMED = 10_000


@dataclass
class WorkerStats:
    """Counts and claim timings, for the exit summary and the benchmark."""

    claims: int = 0
    claimed: int = 0
    #: Durations of the last claims that found work (empty polls are not timed). Bounded: a
    #: worker that runs for months keeps the same memory (~0.3 MB at most).
    claim_seconds: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=CLAIMS_TIMED)
    )
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    #: Claimed jobs ended at their start, past their start-by deadline (never ran).
    expired: int = 0
    released: int = 0
    stuck: int = 0
    #: Turns of the claim loop that claimed nothing because the heartbeat was unanswered.
    held_back: int = 0
    first_claim_at: float | None = None
    last_outcome_at: float | None = None
    #: Where the claims stopped, and how often they read every job from the start.
    positions: ClaimPositions | None = None

    @property
    def executions(self) -> int:
        """Executions whose outcome this worker wrote (a job retried twice counts three)."""
        return sum(self.outcomes.values())

    @property
    def jobs_finished(self) -> int:
        """Jobs this worker brought to an end: completed, failed, skipped, cancelled or parked."""
        return sum(self.outcomes[status] for status in _FINAL)

    def describe(self, outcomes: collections.Counter[str] | None = None) -> str:
        """``8 executions: 3 completed, 4 retried, 1 failed (4 jobs finished)`` and the rest."""
        outcomes = self.outcomes if outcomes is None else outcomes
        executions = sum(outcomes.values())
        order = [*_SUMMARY_ORDER, *sorted(set(outcomes) - set(_SUMMARY_ORDER))]
        parts = ", ".join(
            f"{outcomes[status]} {_OUTCOME_NAMES.get(status, status)}" for status in order if outcomes[status]
        )
        finished = sum(outcomes[status] for status in _FINAL)
        text = f"{executions} execution{'s' if executions != 1 else ''}"
        if parts:
            text += f": {parts} ({finished} job{'s' if finished != 1 else ''} finished)"
        return text

    def summary(self) -> dict[str, Any]:
        processed = self.executions
        busy = (self.last_outcome_at or 0) - (self.first_claim_at or 0)
        timings = sorted(self.claim_seconds)

        def pct(p: float) -> float | None:
            if not timings:
                return None
            return round(1000 * timings[min(len(timings) - 1, int(p * len(timings)))], 3)

        return {
            "executions": processed,
            "jobs_finished": self.jobs_finished,
            "outcomes": dict(self.outcomes),
            "lost_leases": self.lost,
            "expired": self.expired,
            "released": self.released,
            "stuck": self.stuck,
            "held_back": self.held_back,
            "claims": self.claims,
            "claims_with_jobs": len(self.claim_seconds),
            "jobs_per_claim": round(self.claimed / len(timings), 1) if timings else 0,
            "claim_ms_p50": round(1000 * _median(timings), 3) if timings else None,
            "claim_ms_p95": pct(0.95),
            "claim_ms_p99": pct(0.99),
            "claim_ms_max": pct(1.0),
            "busy_seconds": round(busy, 3) if busy > 0 else 0,
            "jobs_per_second": round(processed / busy, 1) if busy > 0 else None,
            "claim_sweeps": self.positions.sweeps if self.positions else None,
            "claims_from_places": self.positions.resumed if self.positions else None,
            "dead_entries_walked_max": self.positions.most_walked if self.positions else None,
        }


def _median(ordered: list[float]) -> float:
    """statistics.median of a sorted, non-empty list (the module is not loaded for this one use)."""
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


class Summaries:
    """Logs, every ``SUMMARY_INTERVAL``, what the worker wrote since the last summary; an idle
    worker stays quiet. ``holding`` says how many jobs the worker holds (buffered or running)."""

    def __init__(self, stats: WorkerStats, worker_id: str, holding: Callable[[], int]) -> None:
        self._stats = stats
        self._worker_id = worker_id
        self._holding = holding
        self._summary_at = time.monotonic() + SUMMARY_INTERVAL
        self._summarised: collections.Counter[str] = collections.Counter()

    def log_if_due(self) -> None:
        now = time.monotonic()
        if now < self._summary_at:
            return
        # The outcome writer counts meanwhile: dict.copy is one C call, safe while it adds a key.
        outcomes = collections.Counter(dict.copy(self._stats.outcomes))
        since = outcomes - self._summarised
        self._summarised = outcomes
        elapsed = SUMMARY_INTERVAL + (now - self._summary_at)
        self._summary_at = now + SUMMARY_INTERVAL
        if not since:
            return  # an idle worker stays quiet
        logger.info(
            "last %.0fs: %s, %.1f/s; holding %s", elapsed, self._stats.describe(since),
            sum(since.values()) / elapsed, self._holding(), extra=logs.worker_fields(self._worker_id),
        )  # fmt: skip
