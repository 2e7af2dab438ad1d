"""The W3C ``traceparent`` a job's stored trace context must hold, read without OpenTelemetry.

Shared by the span maker (which refuses a stored context without a well-formed one) and the job
page (which shows its trace id), so neither needs the other.
"""

from __future__ import annotations

import re

#: A W3C ``traceparent`` (version-trace id-span id-flags): the only one a job's context may hold.
TRACEPARENT = re.compile(r"\A[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")


def well_formed(traceparent: object) -> bool:
    """Whether ``traceparent`` is a W3C traceparent."""
    return isinstance(traceparent, str) and TRACEPARENT.match(traceparent) is not None


def trace_id_of(stored: object) -> str | None:
    """The trace id of a job's stored context (its column's value), None if it holds none."""
    traceparent = stored.get("traceparent") if isinstance(stored, dict) else None
    if not well_formed(traceparent):
        return None
    return str(traceparent).split("-")[1]
