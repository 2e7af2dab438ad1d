"""Whether an application may have set an OpenTelemetry provider, told without importing
opentelemetry-api.

Importing the API's trace and metrics modules costs a process about 0.6 MB, and a worker asks at
every claim whether spans are recorded. A provider is set by an application that imports the API
to set it (in its own code, or through ``opentelemetry-instrument``, before Django starts), or
named in the environment (``OTEL_PYTHON_TRACER_PROVIDER``, ``OTEL_PYTHON_METER_PROVIDER``),
which the API loads at its first use. Until one of those has happened no provider is set, and
django_jobs does not import the API to learn that.
"""

from __future__ import annotations

import os
import sys


def tracer_provider_may_be_set() -> bool:
    """Whether a tracer provider may be set (``observe.tracing`` then asks the API)."""
    return "opentelemetry.trace" in sys.modules or "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def meter_provider_may_be_set() -> bool:
    """Whether a meter provider may be set (``observe.metrics`` then asks the API)."""
    return "opentelemetry.metrics" in sys.modules or "OTEL_PYTHON_METER_PROVIDER" in os.environ
