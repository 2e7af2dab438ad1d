"""Prometheus metrics, with the ``prometheus`` extra (``pip install django-jobs-pg[prometheus]``).

Two kinds, as the peers split them (celery-exporter, River's and Oban's telemetry):

- *events*, counted by the process they happen in: jobs enqueued (any process), and started,
  finished and recovered (a worker, only when it serves ``runjobs --metrics-port``); each
  worker exposes its own on its port, so a scrape never hits the database once per worker;
- *state*, read from the database when scraped (:func:`queue_families`): per queue, the
  dashboard's own figures (``django_jobs.reads.queues.queue_rows``), served by the view of
  ``django_jobs.urls``.

Every label a worker's counters carry holds at most ``METRICS_MAX_LABEL_VALUES`` distinct
values (:class:`LabelValues`); later values are counted as ``other``. Error codes and queues are
strings that handlers and callers choose: a handler that put a job's id in its code would
otherwise make a series per job, in every worker, for as long as it runs.

Without prometheus-client every hook here is one attribute check (``AVAILABLE`` or the
worker's ``None``). With it, a finished job costs a dict lookup and two or three updates of
prometheus-client's children, which this module caches by (type, queue).
"""

from __future__ import annotations

import bisect
import hmac
import importlib.util
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django_jobs.decision import Happened

if TYPE_CHECKING:
    from django_jobs.maintenance.reaper import ReapResult
    from django_jobs.reads.queues import QueueRow
    from django_jobs.runtime.executor import Finished
    from django_jobs.transitions import Claim, Outcome


def _importable() -> bool:
    """Whether prometheus-client can be imported, without importing it here.

    It is imported by the first metric this process records or serves: a worker without
    ``--metrics-port`` never does, and keeps its ~4 MB.
    """
    try:
        return importlib.util.find_spec("prometheus_client") is not None
    except (ImportError, ValueError):
        return False


#: Whether prometheus-client is installed: the hooks do nothing without it.
AVAILABLE = _importable()


def usable() -> bool:
    """Import prometheus-client now (for a command or a view about to serve metrics): whether
    it could be. A broken installation turns every hook off, as a missing one does."""
    global AVAILABLE
    if AVAILABLE:
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            AVAILABLE = False
    return AVAILABLE


PREFIX = "django_jobs"
#: Run time buckets (seconds): from no-op jobs to the hour-long report.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Queue wait buckets (seconds): a listening worker starts a job in milliseconds; a backlog
#: makes it wait minutes or hours.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)

#: Executions that never ran their handler (a prefetched job given back): not outcomes.
_UNSTARTED = Happened.NOT_STARTED
#: Outcome statuses counted by (type, queue) alone; failures and retries carry their code.
_PLAIN = ("completed", "skipped", "cancelled", "needs_review")
_COUNTERS = (
    ("started", "Executions started by this worker."),
    ("completed", "Executions that ended completed."),
    ("skipped", "Executions that ended skipped (SkipJob)."),
    ("cancelled", "Executions that ended cancelled."),
    ("needs_review", "Executions that ended parked for review."),
    ("lost", "Executions whose outcome was discarded: their lease was taken over."),
)
_CODED = (
    ("failed", "Executions that ended failed, by error code."),
    ("retried", "Executions that ended with a retry scheduled, by error code."),
)

_HISTOGRAMS = (
    ("run_seconds", "Run time of executions: the handler's start to its end."),
    ("queue_wait_seconds", "Seconds from a job's available_at to the claim that starts it (database clock)."),
)


#: The value a label takes in place of any past the first ``METRICS_MAX_LABEL_VALUES``.
OTHER = "other"


class LabelValues:
    """The distinct values one label has taken, up to ``cap``: any later one is :data:`OTHER`.

    The first values seen keep their own series for the life of the process, so a series
    never changes its meaning between scrapes.
    """

    __slots__ = ("_lock", "cap", "seen")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def fold(self, value: str) -> str:
        if value in self.seen:  # the common case, without the lock
            return value
        if len(self.seen) >= self.cap:  # full: it never shrinks
            return OTHER
        with self._lock:
            if value in self.seen:
                return value
            if len(self.seen) >= self.cap:
                return OTHER
            self.seen.add(value)
            return value


def bearer_token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header presents ``token`` as its bearer token.

    Compared in constant time: the time to refuse says nothing of how close a guess was.
    """
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


class _Histogram:
    """Bucket counts as prometheus-client keeps them, without its locks per bucket."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # `le` buckets: a value equal to a bound belongs to it, as bisect_left finds it.
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        from prometheus_client.utils import floatToGoString

        total = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip((*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class _Series:
    """What one (type, queue) of a worker counted, under its labels' folded values."""

    __slots__ = ("counts", "queue", "run", "type", "wait")

    def __init__(self, type_name: str, queue: str) -> None:
        self.type, self.queue = type_name, queue
        self.counts = dict.fromkeys((name for name, _ in _COUNTERS), 0)
        self.run = _Histogram(RUN_BUCKETS)
        self.wait = _Histogram(WAIT_BUCKETS)


class Metrics:
    """The event metrics of this process.

    Enqueues and recoveries are prometheus-client counters on its default registry (its
    multiprocess mode then sums the enqueues of gunicorn's processes). Executions are counted
    on the hot path of a worker, thousands a second: as plain numbers under one lock (a few
    hundred nanoseconds), turned into metric families only when scraped.
    """

    def __init__(self, registry: Any = None, max_label_values: int | None = None) -> None:
        """Registered on ``registry``, by default prometheus-client's default registry; each
        label holds at most ``max_label_values`` values (default: the setting)."""
        import prometheus_client
        from prometheus_client import Counter

        from django_jobs.conf import jobs_settings

        registry = registry or prometheus_client.REGISTRY
        cap = jobs_settings.METRICS_MAX_LABEL_VALUES if max_label_values is None else max_label_values
        self.label_values = {name: LabelValues(cap) for name in ("type", "queue", "code", "status")}
        self.enqueued = Counter(
            f"{PREFIX}_enqueued",
            "Jobs enqueued (created: an enqueue deduplicated onto a job is not).",
            ["type", "queue"],
            registry=registry,
        )
        self.recovered = Counter(
            f"{PREFIX}_recovered", "Jobs the reaper took back from a lost execution, by the status given.",
            ["type", "status"], registry=registry,
        )  # fmt: skip
        self._series: dict[tuple[str, str], _Series] = {}
        self._coded: dict[tuple[str, str, str, str], int] = {}  # (counter, type, queue, code) → n
        self._lock = threading.Lock()
        registry.register(self)

    def _of(self, type_name: str, queue: str) -> _Series:
        series = self._series.get((type_name, queue))
        if series is None:  # a new pair, or one folded into "other": fold its labels
            folded = (self._fold("type", type_name), self._fold("queue", queue))
            series = self._series.get(folded) or self._series.setdefault(folded, _Series(*folded))
        return series

    def _fold(self, label: str, value: str) -> str:
        return self.label_values[label].fold(value)

    # ---- hooks --------------------------------------------------------------------------------

    def on_enqueued(self, type_name: str, queue: str, count: int) -> None:
        self.enqueued.labels(self._fold("type", type_name), self._fold("queue", queue)).inc(count)

    def on_started(self, claim: Claim) -> None:
        series = self._of(claim.type, claim.queue)
        with self._lock:
            series.counts["started"] += 1
            series.wait.observe(max(0.0, claim.waited))

    def on_finished(self, finished: Finished, outcome: Outcome | None) -> None:
        """One execution's outcome as written (None: lost, nothing was written)."""
        if finished.happened is _UNSTARTED:
            return  # given back unstarted: it did not run
        claim = finished.claim
        series = self._of(claim.type, claim.queue)
        status = "lost" if outcome is None else str(outcome.status)
        with self._lock:
            if finished.ran_for is not None:
                series.run.observe(finished.ran_for)
            if status in series.counts:
                series.counts[status] += 1
            elif outcome is not None and (
                status == "failed" or (status == "pending" and outcome.event == "retry_scheduled")
            ):
                key = ("failed" if status == "failed" else "retried", series.type, series.queue,
                       self._fold("code", outcome.error_code or "UNKNOWN"))  # fmt: skip
                self._coded[key] = self._coded.get(key, 0) + 1

    def on_reaped(self, result: ReapResult) -> None:
        for job in result.jobs:
            self.recovered.labels(self._fold("type", job.type), self._fold("status", job.status)).inc()

    # ---- a scrape -----------------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        """The executions' metric families (prometheus-client's collector protocol)."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        with self._lock:
            counts = {(s.type, s.queue): dict(s.counts) for s in self._series.values()}
            histograms = {
                (name, (s.type, s.queue)): (hist.cumulative(), hist.sum)
                for s in self._series.values()
                for name, hist in (("run_seconds", s.run), ("queue_wait_seconds", s.wait))
            }
            coded = dict(self._coded)
        for name, text in _COUNTERS:
            family = CounterMetricFamily(f"{PREFIX}_{name}", text, labels=["type", "queue"])
            for (type_name, queue), counted in sorted(counts.items()):
                family.add_metric([type_name, queue], counted[name])
            yield family
        for name, text in _CODED:
            family = CounterMetricFamily(f"{PREFIX}_{name}", text, labels=["type", "queue", "code"])
            for (counter, type_name, queue, code), n in sorted(coded.items()):
                if counter == name:
                    family.add_metric([type_name, queue, code], n)
            yield family
        for name, text in _HISTOGRAMS:
            family_h = HistogramMetricFamily(f"{PREFIX}_{name}", text, labels=["type", "queue"])
            for (hist_name, (type_name, queue)), (buckets, total) in sorted(histograms.items()):
                if hist_name == name:
                    family_h.add_metric([type_name, queue], buckets=buckets, sum_value=total)
            yield family_h


def disable_created_series() -> None:
    """Leave out the ``_created`` series of counters and histograms (a worker's own process)."""
    if AVAILABLE:
        import prometheus_client

        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


_metrics: Metrics | None = None
_metrics_lock = threading.Lock()


def recorder() -> Metrics | None:
    """This process's metrics, or None without prometheus-client."""
    global _metrics
    if not usable():
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
    from prometheus_client.core import GaugeMetricFamily

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
