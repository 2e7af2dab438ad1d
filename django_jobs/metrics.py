"""Prometheus metrics, with the ``prometheus`` extra (``pip install django-jobs-pg[prometheus]``).

Two kinds, as the peers split them (celery-exporter, River's and Oban's telemetry):

- *events*, counted by the process they happen in: jobs enqueued (any process), and started,
  finished and recovered (a worker, only when it serves ``runjobs --metrics-port``); each
  worker exposes its own on its port, so a scrape never hits the database once per worker;
- *state*, read from the database when scraped (:func:`queue_families`): per queue, the
  dashboard's own figures (``django_jobs.dashboard.queue_rows``), served by the view of
  ``django_jobs.urls``.

Without prometheus-client every hook here is one attribute check (``AVAILABLE`` or the
worker's ``None``). With it, a finished job costs a dict lookup and two or three updates of
prometheus-client's children, which this module caches by (type, queue).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_jobs.decision import Happened

if TYPE_CHECKING:
    from django_jobs.dashboard import QueueRow
    from django_jobs.executor import Finished
    from django_jobs.reaper import ReapResult
    from django_jobs.transitions import Claim, Outcome

try:
    import prometheus_client
    from prometheus_client import Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # the extra is not installed: every hook is off
    prometheus_client = None  # type: ignore[assignment]

#: Whether prometheus-client is installed: the hooks do nothing without it.
AVAILABLE = prometheus_client is not None

PREFIX = "django_jobs"
#: Run time buckets (seconds): from no-op jobs to the hour-long report.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Queue wait buckets (seconds): a listening worker starts a job in milliseconds; a backlog
#: makes it wait minutes or hours.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)

#: Executions that never ran their handler: released, not counted as outcomes.
_UNSTARTED = (Happened.NOT_STARTED, Happened.OUTAGE)
#: The outcomes counted by status, with the counter each goes to (retries and failures carry
#: their error code; a job given back unstarted is not an outcome: it did not run).
_BY_STATUS = {
    "completed": "completed",
    "skipped": "skipped",
    "cancelled": "cancelled",
    "needs_review": "needs_review",
}


@dataclass(slots=True)
class _Children:
    """prometheus-client's children for one (type, queue), looked up once."""

    started: Any
    wait: Any
    run: Any
    completed: Any
    skipped: Any
    cancelled: Any
    needs_review: Any


class Metrics:
    """The event metrics of this process, registered once on prometheus-client's default
    registry (so its multiprocess mode works for the web processes of gunicorn)."""

    def __init__(self) -> None:
        labels = ["type", "queue"]
        coded = ["type", "queue", "code"]
        self.enqueued = Counter(
            f"{PREFIX}_enqueued",
            "Jobs enqueued (created: an enqueue deduplicated onto a job is not).",
            labels,
        )
        self.started = Counter(f"{PREFIX}_started", "Executions started by this worker.", labels)
        self.completed = Counter(f"{PREFIX}_completed", "Executions that ended completed.", labels)
        self.failed = Counter(f"{PREFIX}_failed", "Executions that ended failed, by error code.", coded)
        self.retried = Counter(f"{PREFIX}_retried", "Executions that ended with a retry scheduled.", coded)
        self.skipped = Counter(f"{PREFIX}_skipped", "Executions that ended skipped (SkipJob).", labels)
        self.cancelled = Counter(f"{PREFIX}_cancelled", "Executions that ended cancelled.", labels)
        self.needs_review = Counter(
            f"{PREFIX}_needs_review", "Executions that ended parked for review.", labels
        )
        self.lost = Counter(
            f"{PREFIX}_lost", "Executions whose outcome was discarded: their lease was taken over.", labels
        )
        self.recovered = Counter(
            f"{PREFIX}_recovered", "Jobs the reaper took back from a lost execution, by the status given.",
            ["type", "status"],
        )  # fmt: skip
        self.run_seconds = Histogram(
            f"{PREFIX}_run_seconds", "Run time of executions: the handler's start to its end.", labels,
            buckets=RUN_BUCKETS,
        )  # fmt: skip
        self.queue_wait_seconds = Histogram(
            f"{PREFIX}_queue_wait_seconds",
            "Seconds from a job's available_at to the claim that starts it (database clock).",
            labels,
            buckets=WAIT_BUCKETS,
        )
        self._children: dict[tuple[str, str], _Children] = {}
        self._lock = threading.Lock()

    def _of(self, type_name: str, queue: str) -> _Children:
        children = self._children.get((type_name, queue))
        if children is None:
            with self._lock:
                families = (
                    self.started, self.queue_wait_seconds, self.run_seconds, self.completed,
                    self.skipped, self.cancelled, self.needs_review,
                )  # fmt: skip
                children = _Children(*(family.labels(type_name, queue) for family in families))
                self._children[(type_name, queue)] = children
        return children

    # ---- hooks --------------------------------------------------------------------------------

    def on_enqueued(self, type_name: str, queue: str, count: int) -> None:
        self.enqueued.labels(type_name, queue).inc(count)

    def on_started(self, claim: Claim) -> None:
        children = self._of(claim.type, claim.queue)
        children.started.inc()
        children.wait.observe(max(0.0, claim.waited))

    def on_finished(self, finished: Finished, outcome: Outcome | None) -> None:
        """One execution's outcome as written (None: lost, nothing was written)."""
        claim = finished.claim
        if finished.happened in _UNSTARTED:
            return  # given back unstarted, or released in an outage: it did not run
        children = self._of(claim.type, claim.queue)
        if finished.ran_for is not None:
            children.run.observe(finished.ran_for)
        if outcome is None:
            self.lost.labels(claim.type, claim.queue).inc()
            return
        status = str(outcome.status)
        counter = _BY_STATUS.get(status)
        if counter is not None:
            getattr(children, counter).inc()
        elif status == "failed":
            self.failed.labels(claim.type, claim.queue, outcome.error_code or "UNKNOWN").inc()
        elif status == "pending" and outcome.event == "retry_scheduled":
            self.retried.labels(claim.type, claim.queue, outcome.error_code or "UNKNOWN").inc()

    def on_reaped(self, result: ReapResult) -> None:
        for job in result.jobs:
            self.recovered.labels(job.type, job.status).inc()


def disable_created_series() -> None:
    """Leave out the ``_created`` series of counters and histograms (a worker's own process)."""
    if AVAILABLE:
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


_metrics: Metrics | None = None
_metrics_lock = threading.Lock()


def recorder() -> Metrics | None:
    """This process's metrics, or None without prometheus-client."""
    global _metrics
    if not AVAILABLE:
        return None
    if _metrics is None:
        with _metrics_lock:
            if _metrics is None:
                _metrics = Metrics()
    return _metrics


def enqueued(jobs: Iterable[tuple[str, str]]) -> None:
    """Count created jobs, given as (type, queue) pairs (an attribute check without the extra)."""
    metrics = recorder()
    if metrics is None:
        return
    counts: dict[tuple[str, str], int] = {}
    for key in jobs:
        counts[key] = counts.get(key, 0) + 1
    for (type_name, queue), count in counts.items():
        metrics.on_enqueued(type_name, queue, count)


# ---- the database's state, per queue ------------------------------------------------------------

#: (metric suffix, QueueRow attribute, help): the dashboard's per-queue figures.
QUEUE_GAUGES = (
    ("queue_pending", "pending", "Pending jobs, due now or later."),
    ("queue_due", "due", "Pending jobs due now (available_at <= now()): claimable unless paused or held."),
    ("queue_oldest_due_seconds", "oldest_due_seconds",
     "Age of the oldest job due now, in seconds since its available_at (0 with none due)."),
    ("queue_running", "running", "Running jobs."),
    ("queue_stale_running", "stale", "Running jobs whose lease expired: the reaper takes them back."),
    ("queue_failed", "failed", "Failed jobs kept (until retried or pruned by RETENTION)."),
    ("queue_needs_review", "needs_review", "Jobs parked for review."),
    ("queue_paused", "paused", "1 while the queue is paused, else 0."),
)  # fmt: skip


def queue_families(rows: Iterable[QueueRow]) -> Iterator[Any]:
    """The per-queue gauges of the dashboard's rows, as prometheus-client metric families."""
    families = {
        attr: GaugeMetricFamily(f"{PREFIX}_{suffix}", text, labels=["queue"])
        for suffix, attr, text in QUEUE_GAUGES
    }
    for row in rows:
        for attr, family in families.items():
            if attr == "paused":
                value: float = 1.0 if row.paused_at is not None else 0.0
            else:
                value = float(getattr(row, attr) or 0)
            family.add_metric([row.queue], value)
    yield from families.values()
