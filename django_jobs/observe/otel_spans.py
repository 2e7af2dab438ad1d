"""The spans of django_jobs, made with ``opentelemetry-api`` (imported by ``observe.tracing``
only once tracing may be on).

Three spans, named and attributed after OpenTelemetry's messaging conventions, with
``messaging.system`` ``django_jobs``, the queue as ``messaging.destination.name`` and the job's
id as ``messaging.message.id``:

- ``send {queue}`` (producer): an ``enqueue()`` or ``enqueue_many()`` call, around its INSERT;
- ``retry {queue}`` (producer): an operator's retry (console, ``manage.py jobs``, Python);
- ``process {queue}`` (consumer): one execution, around the handler. Its parent is the context
  stored by the producer span, which it also links to, so that a job is in the trace of the
  request that enqueued it, however much later it runs, and each attempt is a sibling there.

The stored context is W3C Trace Context (``traceparent``, ``tracestate``) and W3C Baggage,
whatever propagator the application configured for its own requests, bounded in size
(``MAX_TRACESTATE``, ``MAX_BAGGAGE``): what exceeds a bound is dropped, with a debug log.

No call into OpenTelemetry may fail the enqueue or the job it traces: the SDK calls the user's
span processors synchronously when a span starts and ends, so both are guarded here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from django_jobs.observe.traceparent import well_formed

logger = logging.getLogger("django_jobs.tracing")

SYSTEM = "django_jobs"
#: The most characters of ``tracestate`` and of ``baggage`` stored with a job (W3C allows 512
#: list members for the first and 8,192 bytes for the second; a job keeps what a trace needs).
MAX_TRACESTATE = 512
MAX_BAGGAGE = 1024

_TRACE_CONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()
_tracers: tuple[object, trace.Tracer] | None = None


def _tracer() -> trace.Tracer:
    """The tracer of the provider set now. Not ``trace.get_tracer()`` once at import: its proxy
    keeps the first provider's tracer for good, and a provider may be replaced (tests do)."""
    global _tracers
    provider = trace.get_tracer_provider()
    if _tracers is None or _tracers[0] is not provider:
        _tracers = (provider, provider.get_tracer("django_jobs"))
    return _tracers[1]


def configured() -> bool:
    """Whether an application set a tracer provider (until then, spans record nothing)."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


def _start(name: str, kind: SpanKind, attributes: Mapping[str, Any], **options: Any) -> trace.Span:
    try:
        return _tracer().start_span(name, kind=kind, attributes=attributes, **options)
    except Exception:
        logger.warning("a span processor failed at the start of span %r; not traced", name, exc_info=True)
        return trace.INVALID_SPAN


def _end(span: trace.Span) -> None:
    try:
        span.end()
    except Exception:
        logger.warning("a span processor failed at the end of a span; its job goes on", exc_info=True)


@contextmanager
def _current(span: trace.Span, context: otel_context.Context | None = None) -> Iterator[trace.Span]:
    """``span`` as the current span inside the block, ended after it however the block ends;
    over ``context`` (its baggage and other entries) when given, else over the current one."""
    token = otel_context.attach(trace.set_span_in_context(span, context))
    try:
        yield span
    except BaseException as exc:
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        otel_context.detach(token)
        _end(span)


def _messaging(operation: str, kind: str, queue: str, job_type: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
        "django_jobs.job.type": job_type,
    }


def carrier(span: trace.Span) -> str | None:
    """The W3C context of ``span`` and the current baggage, as JSON text to store with a job;
    None when ``span`` records nothing (no context worth storing)."""
    if not span.get_span_context().is_valid:
        return None
    found: dict[str, str] = {}
    _TRACE_CONTEXT.inject(found, context=trace.set_span_in_context(span))
    _BAGGAGE.inject(found)
    if len(found.get("tracestate", "")) > MAX_TRACESTATE:
        logger.debug("tracestate of %s characters not stored with the job (at most %s)",
                     len(found["tracestate"]), MAX_TRACESTATE)  # fmt: skip
        del found["tracestate"]
    if len(found.get("baggage", "")) > MAX_BAGGAGE:
        logger.debug("baggage of %s characters not stored with the job (at most %s)",
                     len(found["baggage"]), MAX_BAGGAGE)  # fmt: skip
        del found["baggage"]
    return json.dumps(found, separators=(",", ":")) if "traceparent" in found else None


def parent_context(stored: object) -> otel_context.Context | None:
    """The context a job stored (JSON text or an already decoded object), or None when there is
    none or it is not one: a malformed or oversized value is dropped with a debug log, and the
    execution starts a trace of its own."""
    if stored is None:
        return None
    try:
        found = json.loads(stored) if isinstance(stored, str | bytes) else stored
    except ValueError:
        found = None
    problem = _problem(found)
    if problem is not None:
        logger.debug("stored trace context dropped: %s", problem)
        return None
    assert isinstance(found, dict)
    context = _TRACE_CONTEXT.extract(found)
    if not trace.get_current_span(context).get_span_context().is_valid:
        logger.debug("stored trace context dropped: its traceparent names no valid span")
        return None
    return _BAGGAGE.extract(found, context=context) if "baggage" in found else context


def _problem(found: object) -> str | None:
    if not isinstance(found, dict):
        return "not a JSON object"
    if not all(isinstance(v, str) for v in found.values()):
        return "a value that is not text"
    if not well_formed(found.get("traceparent")):
        return "no well-formed traceparent"
    if len(found.get("tracestate", "")) > MAX_TRACESTATE or len(found.get("baggage", "")) > MAX_BAGGAGE:
        return "tracestate or baggage over its bound"
    return None


class Producing:
    """A producer span open around an INSERT: the context to store, and what it wrote."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.context = carrier(span)

    def wrote(self, job_ids: list[int]) -> None:
        try:
            if len(job_ids) == 1:
                self.span.set_attribute("messaging.message.id", str(job_ids[0]))
            self.span.set_attribute("messaging.batch.message_count", len(job_ids))
        except Exception:  # a span the SDK refuses to change is still no reason to fail
            logger.debug("could not set the attributes of an enqueue span", exc_info=True)


@contextmanager
def producing(
    operation: str, queue: str, job_type: str, count: int, job_id: int | None = None
) -> Iterator[Producing]:
    """A ``send`` (or ``retry``) span around writing ``count`` jobs, current inside the block."""
    attributes = _messaging(operation, "send", queue, job_type)
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    if job_id is not None:
        attributes["messaging.message.id"] = str(job_id)
    span = _start(f"{operation} {queue}", SpanKind.PRODUCER, attributes)
    with _current(span):
        yield Producing(span)


@contextmanager
def processing(
    *, job_id: int, queue: str, job_type: str, attempt: int, max_attempts: int, execution_id: str,
    waited: float, stored: object,
) -> Iterator[trace.Span]:  # fmt: skip
    """A ``process`` span around one execution, current inside the block, child of and linked
    to the context the job stored (a trace of its own when there is none)."""
    parent = parent_context(stored)
    links = [] if parent is None else [Link(trace.get_current_span(parent).get_span_context())]
    attributes = _messaging("process", "process", queue, job_type)
    attributes.update({
        "messaging.message.id": str(job_id),
        "django_jobs.job.attempt": attempt,
        "django_jobs.job.max_attempts": max_attempts,
        "django_jobs.execution.id": execution_id,
        "django_jobs.job.queue_wait_seconds": round(max(0.0, waited), 6),
    })  # fmt: skip
    # No parent: a root span, whatever span the worker's thread holds.
    span = _start(f"process {queue}", SpanKind.CONSUMER, attributes, context=parent or otel_context.Context(),
                  links=links)  # fmt: skip
    # Current over the stored context, not the worker's: the handler sees the request's baggage.
    with _current(span, parent):
        yield span


def ended(
    span: trace.Span, outcome: str, *, failed: bool, error_code: str | None, error: str | None,
    exception: str | None,
) -> None:  # fmt: skip
    """Record how the execution ended on its span: the outcome, and for a failure the code,
    the exception's class and the sanitized error (never the raw message: it may hold secrets)."""
    try:
        span.set_attribute("django_jobs.outcome", outcome)
        if error_code is not None:
            span.set_attribute("django_jobs.error.code", error_code)
        if exception is not None:
            span.set_attribute("error.type", exception)
        if failed:
            span.set_status(Status(StatusCode.ERROR, (error or error_code or outcome)[:1000]))
    except Exception:
        logger.debug("could not record the end of an execution on its span", exc_info=True)
