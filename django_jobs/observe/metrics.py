"""Prometheus metrics, with the ``prometheus`` extra (``pip install django-jobs-pg[prometheus]``).

Two kinds, as the peers split them (celery-exporter, River's and Oban's telemetry):

- *events*, counted by the process they happen in: jobs enqueued (any process), and started,
  finished and recovered (a worker, only when it serves ``runjobs --metrics-port``); each
  worker exposes its own on its port, so a scrape never hits the database once per worker;
- *state*, read from the database when scraped (:func:`queue_families`,
  :func:`durable_families`): per queue, the dashboard's own figures
  (``django_jobs.reads.queues.queue_rows``), and its durable jobs asleep and waiting
  (``django_jobs.reads.durable.durable_counts``), served by the view of ``django_jobs.urls``.

Every label a worker's counters carry holds at most ``METRICS_MAX_LABEL_VALUES`` distinct
values (:class:`~django_jobs.observe.labels.LabelValues`); later values are counted as ``other``.

This module is the face: whether prometheus-client is there (``AVAILABLE``), this process's
recorder, and the hook of enqueues. Without prometheus-client every hook is one attribute check
(``AVAILABLE`` or the worker's ``None``). The counting is in :mod:`~django_jobs.observe.counters`,
the label values in :mod:`~django_jobs.observe.labels`, the per-queue gauges and the scrape's
token check in :mod:`~django_jobs.observe.exposition`.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from django_jobs.observe.counters import RUN_BUCKETS as RUN_BUCKETS  # re-exported: the face of the metrics
from django_jobs.observe.counters import WAIT_BUCKETS as WAIT_BUCKETS
from django_jobs.observe.counters import Metrics as Metrics
from django_jobs.observe.exposition import QUEUE_GAUGES as QUEUE_GAUGES
from django_jobs.observe.exposition import bearer_token_matches as bearer_token_matches
from django_jobs.observe.exposition import durable_families as durable_families
from django_jobs.observe.exposition import queue_families as queue_families
from django_jobs.observe.labels import OTHER as OTHER
from django_jobs.observe.labels import PREFIX as PREFIX
from django_jobs.observe.labels import LabelValues as LabelValues
from django_jobs.observe.otel_presence import meter_provider_may_be_set

if TYPE_CHECKING:
    from collections.abc import Callable

    from django_jobs.maintenance.reaper import ReapResult
    from django_jobs.runtime.executor import Finished
    from django_jobs.transitions import Claim, Outcome

logger = logging.getLogger("django_jobs.metrics")


class Recorder(Protocol):
    """What records a process's events: ``counters.Metrics`` (Prometheus) or
    ``otel_metrics.OtelMetrics`` (OpenTelemetry)."""

    def on_enqueued(self, type_name: str, queue: str, count: int) -> None: ...
    def on_started(self, claim: Claim) -> None: ...
    def on_finished(self, finished: Finished, outcome: Outcome | None) -> None: ...
    def on_reaped(self, result: ReapResult) -> None: ...


#: What failed already and was logged at warning: later failures of the same are at debug, so
#: that a meter that raises at every call does not write a traceback per job.
_failures_seen: set[str] = set()


def _failed(what: str, exc: Exception) -> None:
    """Log a metrics failure: at warning the first time, then at debug; its text sanitized as a
    stored error's is (the user's meter may have had a secret in hand)."""
    from django_jobs.sanitize import describe

    if what in _failures_seen:
        logger.debug("metrics: %s failed again; not recorded: %s", what, describe(exc))
        return
    _failures_seen.add(what)
    logger.warning("metrics: %s failed; not recorded, the work goes on: %s", what, describe(exc))


class Guarded:
    """A :class:`Recorder` whose hooks never raise. Metrics, like spans, never fail what they
    measure: a meter, exemplar filter or view of the user's that raises inside a hook would
    otherwise fail an enqueue after its commit (a caller's retry enqueues twice), or a job
    before its handler runs. A failure is logged once at warning, then at debug."""

    def __init__(self, inner: Recorder) -> None:
        self.inner = inner

    def _call(self, hook: Callable[..., None], *args: Any) -> None:
        try:
            hook(*args)
        except Exception as exc:
            _failed(f"{type(self.inner).__name__}.{hook.__name__}", exc)

    def on_enqueued(self, type_name: str, queue: str, count: int) -> None:
        self._call(self.inner.on_enqueued, type_name, queue, count)

    def on_started(self, claim: Claim) -> None:
        self._call(self.inner.on_started, claim)

    def on_finished(self, finished: Finished, outcome: Outcome | None) -> None:
        self._call(self.inner.on_finished, finished, outcome)

    def on_reaped(self, result: ReapResult) -> None:
        self._call(self.inner.on_reaped, result)


def guarded(recorder: Recorder | None) -> Recorder | None:
    """``recorder`` with hooks that never raise (None stays None: one attribute check a job)."""
    if recorder is None or isinstance(recorder, Guarded):
        return recorder
    return Guarded(recorder)


def _importable(module: str = "prometheus_client") -> bool:
    """Whether ``module`` can be imported, without importing it here.

    prometheus-client is imported by the first metric this process records or serves: a
    worker without ``--metrics-port`` never does, and keeps its ~4 MB.
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


#: Whether prometheus-client is installed: the hooks do nothing without it.
AVAILABLE = _importable()
#: Whether opentelemetry-api is installed: its meter provider may then be set.
OTEL_AVAILABLE = _importable("opentelemetry.metrics")


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


def _otel_metrics() -> ModuleType | None:
    """``observe.otel_metrics``, or None without opentelemetry-api (a broken installation turns
    it off, as a missing one does)."""
    global OTEL_AVAILABLE
    if not OTEL_AVAILABLE:
        return None
    try:
        from django_jobs.observe import otel_metrics
    except ImportError:
        OTEL_AVAILABLE = False
        return None
    return otel_metrics


def otel_recorder() -> Recorder | None:
    """The event metrics of OpenTelemetry's meter provider, or None while none is set (or
    opentelemetry-api is not installed)."""
    if not meter_provider_may_be_set():  # none is set, and the API stays unimported
        return None
    otel_metrics = _otel_metrics()
    if otel_metrics is None:
        return None
    try:  # a provider whose meter or instruments cannot be made records nothing
        made: Recorder | None = otel_metrics.recorder()
    except Exception as exc:
        _failed("making the OpenTelemetry instruments", exc)
        return None
    return made


def observe_queues_through_otel() -> str | None:
    """Register the per-queue gauges with OpenTelemetry's meter provider, for the one process
    of a deployment asked to (``--otel-queue-gauges``): what stands in the way, in words, or
    None once they are registered."""
    otel_metrics = _otel_metrics()
    if otel_metrics is None:
        return "needs opentelemetry-api: pip install 'django-jobs-pg[otel]'"
    if not otel_metrics.configured():
        return (
            "needs a meter provider, set before the command runs: by opentelemetry-instrument, or"
            " in the settings (docs/operations/tracing.md, \"Metrics through OpenTelemetry\")"
        )
    otel_metrics.observe_queues()
    return None


def enqueued(jobs: Iterable[tuple[str, str]]) -> None:
    """Count created jobs, given as (type, queue) pairs, with Prometheus and with OpenTelemetry
    where each is there (an attribute check without either extra). Never raises: it is called
    once the jobs are written, and a caller that saw the enqueue fail would enqueue again."""
    try:
        recorders = [Guarded(r) for r in (recorder(), otel_recorder()) if r is not None]
        if not recorders:
            return
        counts: dict[tuple[str, str], int] = {}
        for key in jobs:
            counts[key] = counts.get(key, 0) + 1
    except Exception as exc:
        _failed("counting the enqueued jobs", exc)
        return
    for (type_name, queue), count in counts.items():
        for metrics in recorders:
            metrics.on_enqueued(type_name, queue, count)
