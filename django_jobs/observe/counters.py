"""The event metrics a process counts: jobs enqueued, and executions started, finished and
recovered, as :class:`Metrics` (one per process: :func:`django_jobs.observe.metrics.recorder`).

A finished job costs a dict lookup and two or three updates of plain numbers under one lock,
cached by (type, queue); they become prometheus-client's metric families only when scraped
(:meth:`Metrics.collect`). Every label's values are bounded (:mod:`~django_jobs.observe.labels`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django_jobs.decision import Happened
from django_jobs.errors import ErrorCode
from django_jobs.observe.labels import PREFIX, LabelValues

if TYPE_CHECKING:
    from django_jobs.maintenance.reaper import ReapResult
    from django_jobs.runtime.executor import Finished
    from django_jobs.transitions import Claim, Outcome

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
        self.expired = Counter(
            f"{PREFIX}_expired",
            "Jobs ended unrun past their start-by deadline (cancelled, EXPIRED), by who ended them.",
            ["type", "by"], registry=registry,
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
        if finished.happened is None and finished.error_code == ErrorCode.EXPIRED:
            self.expired.labels(self._fold("type", claim.type), "worker").inc()  # ended at its start
            return
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
        for type_name, _queue in result.expired:
            self.expired.labels(self._fold("type", type_name), "reaper").inc()

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
