"""A worker process's spans, one JSON line each, in a file: how the process tests read what a
``runjobs`` process traced (tests/process/test_tracing_workers.py).

Set up by the settings when ``TRACE_SPANS_FILE`` names the file: the SDK's provider with a
processor that exports each span as it ends, so that a span is in the file before the job's
outcome is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def _hex(number: int | None, width: int) -> str | None:
    return None if number is None else f"{number:0{width}x}"


class SpanFile(SpanExporter):
    """Appends each span, as a JSON object on a line of its own, to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            context = span.get_span_context()
            assert context is not None, "an ended span has its context"
            lines.append(json.dumps({
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": _hex(context.trace_id, 32),
                "span_id": _hex(context.span_id, 16),
                "parent_id": _hex(span.parent.span_id if span.parent else None, 16),
                "links": [_hex(link.context.span_id, 16) for link in span.links],
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
                "pid": os.getpid(),
            }) + "\n")  # fmt: skip
        with open(self.path, "a") as out:  # one write per batch: lines of two processes never mix
            out.write("".join(lines))
        return SpanExportResult.SUCCESS


def trace_to(path: str) -> None:
    """Set this process's tracer provider: every span to the file at ``path``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SpanFile(path)))
    trace.set_tracer_provider(provider)
