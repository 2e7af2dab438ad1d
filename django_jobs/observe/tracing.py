"""OpenTelemetry tracing, with the ``otel`` extra (``pip install django-jobs-pg[otel]``).

One trace from the request that enqueued a job to the job's last attempt: the enqueue is a
span (producer), its W3C trace context is stored on the job (``Job.trace_context``), and each
execution is a span (consumer) whose parent is that context, with the handler running inside
it so that the user's own spans and the psycopg and Django instrumentations nest under it. An
operator's retry stores its own span's context instead. The spans follow OpenTelemetry's
messaging conventions (docs/operations/tracing.md).

This module is the face, as ``observe.metrics`` is for Prometheus: it never imports
OpenTelemetry itself. Tracing is on when ``opentelemetry-api`` is installed *and* a tracer
provider has been set (the SDK's, by the user's code or ``opentelemetry-instrument``); until
then every hook is one call that returns at once, nothing is stored with the job, and the API is
not imported (``observe.otel_presence``). The spans are made by
:mod:`~django_jobs.observe.otel_spans`.

Tracing never fails what it traces: a span processor that raises, or a stored context that is
not one, is logged (at debug level for bad input) and the enqueue or the job goes on.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from django_jobs.decision import Happened
from django_jobs.observe.otel_presence import tracer_provider_may_be_set

if TYPE_CHECKING:
    from django_jobs.transitions import Claim

#: The endings recorded as an error on the execution's span.
_FAILED = frozenset({Happened.RETRYABLE, Happened.PERMANENT, Happened.OUTAGE, Happened.UNSTORABLE})


def _importable() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


#: Whether opentelemetry-api is installed: without it, every hook returns at once.
AVAILABLE = _importable()
_spans: ModuleType | None = None


def spans() -> ModuleType | None:
    """The span maker, imported on first use; None when OpenTelemetry cannot be imported."""
    global _spans, AVAILABLE
    if _spans is None and AVAILABLE:
        try:
            from django_jobs.observe import otel_spans
        except ImportError:  # a broken installation turns tracing off, as a missing one does
            AVAILABLE = False
            return None
        _spans = otel_spans
    return _spans


def enabled() -> bool:
    """Whether spans are recorded: OpenTelemetry is installed and a tracer provider is set."""
    if not AVAILABLE or not tracer_provider_may_be_set():
        return False
    made = spans()
    return made is not None and bool(made.configured())


def attach_contexts(claims: Sequence[Claim]) -> None:
    """Read the trace context stored with each claimed job onto its claim (one statement for
    the whole claim), when tracing is on. The claim itself does not read the column: a worker
    that does not trace pays nothing for it."""
    if not claims:
        return
    # Asked once for the batch: each execution of it reads the answer instead of asking
    # OpenTelemetry again (its tracer provider's lookup reads the environment when none is set).
    traced = enabled()
    for claim in claims:
        claim.traced = traced
    if traced:
        from django_jobs.reads.trace_contexts import trace_contexts

        found = trace_contexts([claim.id for claim in claims])
        for claim in claims:
            claim.trace_context = found.get(claim.id)


def enqueue_span(queue: str, job_type: str, count: int) -> AbstractContextManager[Any]:
    """The ``send`` span around an enqueue of ``count`` jobs, when tracing is on: yields its
    ``Producing`` (the context to store, and ``wrote(ids)``); else a block that yields None."""
    made = spans() if enabled() else None
    return nullcontext() if made is None else made.producing("send", queue, job_type, count)


def retry_span(queue: str, job_type: str, job_id: int) -> AbstractContextManager[Any]:
    """The ``retry`` span around an operator's retry of one job, as :func:`enqueue_span`."""
    made = spans() if enabled() else None
    if made is None:
        return nullcontext()
    return cast(AbstractContextManager[Any], made.producing("retry", queue, job_type, 1, job_id=job_id))


def execution(claim: Claim) -> AbstractContextManager[Any]:
    """The ``process`` span around one execution of ``claim``, current inside the block (the
    handler's own spans nest under it), when tracing is on; else a block that yields None."""
    traced = enabled() if claim.traced is None else claim.traced
    made = spans() if traced else None
    if made is None:
        return nullcontext()
    block = made.processing(
        job_id=claim.id, queue=claim.queue, job_type=claim.type, attempt=claim.attempt,
        max_attempts=claim.max_attempts, execution_id=str(claim.execution_id), waited=claim.waited,
        stored=claim.trace_context,
    )  # fmt: skip
    return cast(AbstractContextManager[Any], block)


def execution_ended(
    span: Any, happened: Happened | None, error_code: str | None, error: str | None, exception: str | None
) -> None:
    """Record on ``span`` how its execution ended (``happened`` None: its lease was lost)."""
    made = spans()
    if span is not None and made is not None:
        outcome = "lease_lost" if happened is None else happened.value
        made.ended(
            span, outcome, failed=happened in _FAILED, error_code=error_code, error=error, exception=exception
        )
