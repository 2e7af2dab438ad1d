"""OpenTelemetry's SDK set as this process's tracer provider for one test, with the in-memory
exporter: the fixtures of the tracing tests (import them into a test module).

The global provider is set once per process by OpenTelemetry's own rule; each test sets its
own and takes it away after, as OpenTelemetry's test utilities do, so that no other test
traces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _forget_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    made = TracerProvider()
    _forget_provider()
    trace.set_tracer_provider(made)
    yield made
    made.shutdown()
    _forget_provider()


@pytest.fixture
def exported(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]
