"""A process's OpenTelemetry metrics, one JSON export a line, in a file: how the process tests
read what a ``runjobs`` or ``reapjobs`` process reported (tests/process/test_otel_gauges.py).

Set up by the settings when ``OTEL_METRICS_FILE`` names the file: the SDK's meter provider with
a reader that exports every ``OTEL_METRICS_EVERY`` milliseconds (default 200), as a collector's
exporter would, but to the file.
"""

from __future__ import annotations

import os

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricsData, PeriodicExportingMetricReader


def _line(data: MetricsData) -> str:
    return data.to_json(indent=None) + "\n"


def meter_to(path: str) -> None:
    """Set this process's meter provider: every export to the file at ``path``."""
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open as long as the process)
    every = float(os.environ.get("OTEL_METRICS_EVERY", "200"))
    reader = PeriodicExportingMetricReader(ConsoleMetricExporter(out=out, formatter=_line), every)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
