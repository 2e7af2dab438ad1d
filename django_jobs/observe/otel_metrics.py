"""Metrics through OpenTelemetry, for an application that already exports to a collector: the
counterpart of the Prometheus metrics (``observe.metrics``), imported only once a meter
provider may be set (the ``otel`` extra).

Two kinds, as with Prometheus:

- *events*, recorded by the process they happen in (:class:`OtelMetrics`, the same hooks as
  ``counters.Metrics``): jobs enqueued, executions started and ended, their run time and queue
  wait, jobs the reaper recovered. A worker records them when a meter provider is set and
  ``runjobs --metrics-port`` is not given (that one serves Prometheus instead);
- *state*, read from the database at each collection (:func:`observe_queues`): the dashboard's
  per-queue figures and its durable jobs asleep and waiting, the gauges of ``/metrics``. Call
  it in one process only: each process that observes them reads the database at every export.

Names follow OpenTelemetry's messaging conventions where they have one
(``messaging.client.sent.messages``, ``messaging.client.consumed.messages``,
``messaging.process.duration``), with ``messaging.system`` ``django_jobs`` and the queue as
``messaging.destination.name``; the rest are ``django_jobs.*``. Every attribute value is
folded past ``METRICS_MAX_LABEL_VALUES`` distinct values, as the Prometheus labels are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics as otel
from opentelemetry.metrics import CallbackOptions, Observation

from django_jobs.decision import Happened
from django_jobs.errors import ErrorCode
from django_jobs.observe.exposition import DURABLE_JOBS, DURABLE_WAITS_OVERDUE, QUEUE_GAUGES
from django_jobs.observe.labels import LabelValues

if TYPE_CHECKING:
    from django_jobs.maintenance.reaper import ReapResult
    from django_jobs.runtime.executor import Finished
    from django_jobs.transitions import Claim, Outcome

SYSTEM = "django_jobs"
#: How long one read of the per-queue figures serves the gauges of one collection.
QUEUE_READ_FRESH_FOR = 1.0
_NOT_SET = ("_ProxyMeterProvider", "NoOpMeterProvider")


def configured() -> bool:
    """Whether an application set a meter provider (until then, nothing is recorded)."""
    return type(otel.get_meter_provider()).__name__ not in _NOT_SET


def _meter() -> otel.Meter:
    return otel.get_meter_provider().get_meter("django_jobs")


class OtelMetrics:
    """This process's event metrics, as OpenTelemetry instruments of the provider set now."""

    def __init__(self, max_label_values: int | None = None) -> None:
        from django_jobs.conf import jobs_settings

        cap = jobs_settings.METRICS_MAX_LABEL_VALUES if max_label_values is None else max_label_values
        self.label_values = {name: LabelValues(cap) for name in ("type", "queue", "code", "status")}
        meter = _meter()
        self.sent = meter.create_counter(
            "messaging.client.sent.messages", unit="{job}", description="Jobs enqueued (created)."
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{execution}", description="Executions started."
        )
        self.duration = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Run time of executions, by how they ended."
        )
        self.wait = meter.create_histogram(
            "django_jobs.queue.wait", unit="s",
            description="Seconds from a job's available_at to the claim that starts it (database clock).",
        )  # fmt: skip
        self.ended = meter.create_counter(
            "django_jobs.executions.ended", unit="{execution}",
            description="Executions ended, by the status written (lost: nothing written) and error code.",
        )  # fmt: skip
        self.recovered = meter.create_counter(
            "django_jobs.jobs.recovered", unit="{job}",
            description="Jobs the reaper took back from a lost execution, by the status given.",
        )  # fmt: skip
        self.expired = meter.create_counter(
            "django_jobs.jobs.expired", unit="{job}",
            description="Jobs ended unrun past their start-by deadline (cancelled, EXPIRED), by whom.",
        )  # fmt: skip

    def _attributes(self, type_name: str, queue: str) -> dict[str, str]:
        return {
            "messaging.system": SYSTEM,
            "messaging.destination.name": self.label_values["queue"].fold(queue),
            "django_jobs.job.type": self.label_values["type"].fold(type_name),
        }

    # ---- the hooks of counters.Metrics ---------------------------------------------------------

    def on_enqueued(self, type_name: str, queue: str, count: int) -> None:
        self.sent.add(count, self._attributes(type_name, queue))

    def on_started(self, claim: Claim) -> None:
        attributes = self._attributes(claim.type, claim.queue)
        self.consumed.add(1, attributes)
        self.wait.record(max(0.0, claim.waited), attributes)

    def on_finished(self, finished: Finished, outcome: Outcome | None) -> None:
        """One execution's outcome as written (None: lost, nothing was written)."""
        if finished.happened is Happened.NOT_STARTED:
            return  # given back unstarted: it did not run
        attributes = self._attributes(finished.claim.type, finished.claim.queue)
        if finished.happened is None and finished.error_code == ErrorCode.EXPIRED:
            self.expired.add(1, {**attributes, "django_jobs.expired_by": "worker"})  # ended at its start
            return
        attributes["django_jobs.status"] = "lost" if outcome is None else str(outcome.status)
        if outcome is not None and outcome.error_code is not None:
            attributes["error.type"] = self.label_values["code"].fold(outcome.error_code)
        self.ended.add(1, attributes)
        if finished.ran_for is not None:
            self.duration.record(finished.ran_for, attributes)

    def on_reaped(self, result: ReapResult) -> None:
        for job in result.jobs:
            attributes = {
                "messaging.system": SYSTEM,
                "django_jobs.job.type": self.label_values["type"].fold(job.type),
                "django_jobs.status": self.label_values["status"].fold(job.status),
            }
            self.recovered.add(1, attributes)
        for type_name, queue in result.expired:
            self.expired.add(1, {**self._attributes(type_name, queue), "django_jobs.expired_by": "reaper"})


_recorders: tuple[object, OtelMetrics] | None = None
_lock = threading.Lock()


def recorder() -> OtelMetrics | None:
    """This process's event metrics for the meter provider set now, or None while none is."""
    global _recorders
    if not configured():
        return None
    provider = otel.get_meter_provider()
    made = _recorders
    if made is not None and made[0] is provider:  # every enqueue asks: no lock on this path
        return made[1]
    with _lock:
        if _recorders is None or _recorders[0] is not provider:
            _recorders = (provider, OtelMetrics())
        return _recorders[1]


class _QueueFigures:
    """The per-queue rows and the durable jobs' counts, read at most once per
    ``QUEUE_READ_FRESH_FOR``: the gauges of one collection share one read."""

    def __init__(self) -> None:
        self._rows: list[Any] = []
        self._durable: Any = None
        self._read_at = -QUEUE_READ_FRESH_FOR
        self._lock = threading.Lock()

    def rows(self) -> list[Any]:
        with self._lock:
            self._refresh()
            return self._rows

    def durable(self) -> Any:
        """The dashboard's ``DurableCounts``."""
        with self._lock:
            self._refresh()
            return self._durable

    def _refresh(self) -> None:
        from django.db import close_old_connections

        from django_jobs.reads.bounded import bounded_reads
        from django_jobs.reads.durable import durable_counts
        from django_jobs.reads.queues import queue_rows

        if time.monotonic() - self._read_at < QUEUE_READ_FRESH_FOR:
            return
        try:
            with bounded_reads():  # one transaction for both reads, as the dashboard's
                self._rows, self._durable = queue_rows(), durable_counts()
        finally:
            close_old_connections()  # the exporter's thread: no connection left open
        self._read_at = time.monotonic()


def observe_queues() -> None:
    """Register the per-queue gauges (``django_jobs.queue.pending``, ``…due``, ``…running``, …)
    and the durable jobs' (``django_jobs.durable.jobs`` by state, ``django_jobs.durable.waits_overdue``)
    with the meter provider set now: each collection reads the figures once. Call it in one
    process (a worker host's, or the reaper's): every process that does reads the database."""
    figures = _QueueFigures()
    meter = _meter()
    for suffix, attr, text in QUEUE_GAUGES:
        name = "django_jobs." + suffix.replace("queue_", "queue.", 1)
        description = text.split(" Counted")[0]  # the cap is said in docs/operations/metrics.md
        meter.create_observable_gauge(name, callbacks=[_gauge(figures, attr)], description=description)
    for (suffix, text), observe in ((DURABLE_JOBS, _durable_jobs), (DURABLE_WAITS_OVERDUE, _durable_overdue)):
        name = "django_jobs." + suffix.replace("durable_", "durable.", 1)
        description = text.split(" Counted")[0]
        meter.create_observable_gauge(name, callbacks=[observe(figures)], description=description)


def _durable_jobs(figures: _QueueFigures) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        counts = figures.durable()
        for state, value in (("sleeping", counts.sleeping), ("waiting", counts.waiting)):
            yield Observation(float(value), {"messaging.system": SYSTEM, "django_jobs.durable.state": state})

    return observe


def _durable_overdue(figures: _QueueFigures) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        yield Observation(float(figures.durable().overdue), {"messaging.system": SYSTEM})

    return observe


def _gauge(figures: _QueueFigures, attr: str) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        for row in figures.rows():
            if attr == "paused":
                value: float = 1.0 if row.paused_at is not None else 0.0
            else:
                value = float(getattr(row, attr) or 0)
            yield Observation(value, {"messaging.system": SYSTEM, "messaging.destination.name": row.queue})

    return observe
