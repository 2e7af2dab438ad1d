"""OpenTelemetry tracing (django_jobs/observe/tracing.py), with the SDK's in-memory exporter:
the enqueue's span, its context stored with the job, each execution a child of it, an
operator's retry, and the bad input tracing must survive.

The tracer provider is set for each test alone (tests/otel_support.py).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from django.test import Client
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_jobs import enqueue, enqueue_many
from django_jobs.console import actions
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.testing import run_one
from tests.admin.console import act_url
from tests.otel_support import exported, named, provider

__all__ = ["exported", "provider"]  # fixtures, used by name

pytestmark = pytest.mark.django_db(transaction=True)

VALID_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _run_until_done(job: Job) -> Job:
    """Run ``job`` here, attempt after attempt, until it ends (its retries are 50 ms apart)."""
    deadline = time.monotonic() + 10
    while True:
        ran = run_one(types=[job.type])
        job.refresh_from_db()
        if job.status not in (JobStatus.PENDING, JobStatus.RUNNING) or time.monotonic() > deadline:
            return job
        if ran is None:
            time.sleep(0.02)


def test_without_a_tracer_provider_nothing_is_stored_and_nothing_traced() -> None:
    assert enqueue("test.traced", {}).trace_context is None
    job = _run_until_done(Job.objects.get())
    assert (job.status, job.trace_context) == (JobStatus.COMPLETED, None)


def test_an_enqueue_is_a_producer_span_whose_context_the_job_stores(exported: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("POST /checkout") as request:
        job = enqueue("test.traced", {}, queue="payments")
    (send,) = named(exported, "send payments")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert send.attributes is not None
    assert dict(send.attributes) == {
        "messaging.system": "django_jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "payments",
        "django_jobs.job.type": "test.traced",
        "messaging.message.id": str(job.id),
        "messaging.batch.message_count": 1,
    }
    stored = Job.objects.get(id=job.id).trace_context
    assert stored == job.trace_context
    context_of_send = send.get_span_context()
    ids = f"{context_of_send.trace_id:032x}-{context_of_send.span_id:016x}"
    assert stored["traceparent"] == f"00-{ids}-{context_of_send.trace_flags:02x}"


def test_enqueue_many_is_one_span_for_the_batch(exported: InMemorySpanExporter) -> None:
    jobs = enqueue_many("test.traced", [{}] * 3)
    (send,) = named(exported, "send default")
    assert send.attributes is not None and send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send.attributes
    assert len({json.dumps(j.trace_context) for j in Job.objects.filter(id__in=[j.id for j in jobs])}) == 1


def test_each_attempt_is_a_child_of_the_enqueue_and_the_handler_nests_under_it(
    exported: InMemorySpanExporter,
) -> None:
    with trace.get_tracer("test").start_as_current_span("POST /checkout"):
        job = enqueue("test.traced", {"succeed_on": 2})
    assert _run_until_done(job).status == JobStatus.COMPLETED

    (send,) = named(exported, "send default")
    first, second = sorted(named(exported, "process default"), key=lambda s: s.start_time or 0)
    for execution in (first, second):
        assert execution.kind is SpanKind.CONSUMER
        assert execution.context.trace_id == send.context.trace_id  # one trace, from the request
        assert execution.parent is not None and execution.parent.span_id == send.context.span_id
        assert [link.context.span_id for link in execution.links] == [send.context.span_id]
    assert first.attributes is not None and second.attributes is not None
    attempts = (first.attributes["django_jobs.job.attempt"], second.attributes["django_jobs.job.attempt"])
    assert attempts == (1, 2)
    assert first.attributes["django_jobs.outcome"] == "retryable"
    assert first.attributes["django_jobs.error.code"] == "PROVIDER_5XX"
    assert first.attributes["error.type"] == "django_jobs.RetryableError"
    assert first.status.status_code is StatusCode.ERROR
    described = first.status.description or ""
    assert "hunter2" not in described and "[REDACTED]" in described
    assert second.attributes["django_jobs.outcome"] == "completed"
    assert second.status.status_code is StatusCode.UNSET
    assert second.attributes["messaging.message.id"] == str(job.id)
    assert second.attributes["django_jobs.job.queue_wait_seconds"] >= 0
    # The handler's own span, one per attempt, under its execution's.
    handler_spans = named(exported, "charge card")
    assert sorted(s.parent.span_id for s in handler_spans if s.parent) == sorted(
        [first.context.span_id, second.context.span_id]
    )


def test_a_request_through_djangos_own_instrumentation_is_the_trace_of_the_job_it_enqueued(
    exported: InMemorySpanExporter,
) -> None:
    """The example shop's checkout view (testproject/shop/views.py) under
    opentelemetry-instrumentation-django, the span opentelemetry-instrument gives a request:
    the enqueue inside the view's transaction is its child, and the job's execution, run
    later by a worker, is in the request's trace."""
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    instrumentor = DjangoInstrumentor()
    instrumentor.instrument()
    try:
        response = Client().post("/shop/checkout/", {"amount_cents": 1250})
    finally:
        instrumentor.uninstrument()
    assert response.status_code == 201, response.content
    job = Job.objects.get(type="shop.charge_order")
    assert _run_until_done(job).status == JobStatus.COMPLETED

    (request,) = [s for s in exported.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert request.attributes is not None and request.attributes["http.route"] == "shop/checkout/"
    (send,) = named(exported, "send default")
    assert send.parent is not None and send.parent.span_id == request.context.span_id
    (execution,) = named(exported, "process default")
    assert execution.context.trace_id == request.context.trace_id
    assert execution.parent is not None and execution.parent.span_id == send.context.span_id
    assert execution.attributes is not None and execution.attributes["messaging.message.id"] == str(job.id)


@pytest.mark.parametrize("where", ["console", "python"])
def test_an_operators_retry_is_a_span_of_their_request_and_the_parent_of_what_runs_next(
    exported: InMemorySpanExporter, admin_client: Any, where: str
) -> None:
    job = enqueue("test.traced", {"succeed_on": 99}, max_attempts=1)
    assert _run_until_done(job).status == JobStatus.FAILED
    enqueued = Job.objects.get(id=job.id).trace_context

    # The request's span stands in for the one Django's instrumentation opens.
    with trace.get_tracer("test").start_as_current_span("POST /admin/retry") as request:
        if where == "console":
            done = admin_client.post(act_url("retry", job.id), {"ids": str(job.id), "reason": "network back"})
            assert done.status_code == 302
        else:
            actions.retry(job.id, reason="the card network is back", actor="ops")
    (retry,) = named(exported, "retry default")
    assert retry.kind is SpanKind.PRODUCER
    assert retry.parent is not None and retry.parent.span_id == request.get_span_context().span_id
    assert retry.attributes is not None and dict(retry.attributes) == {
        "messaging.system": "django_jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "retry",
        "messaging.destination.name": "default",
        "django_jobs.job.type": "test.traced",
        "messaging.message.id": str(job.id),
        "messaging.batch.message_count": 1,
    }  # as send's (docs/operations/tracing.md)
    stored = Job.objects.get(id=job.id).trace_context
    assert stored != enqueued

    run_one(types=["test.traced"])
    latest = max(named(exported, "process default"), key=lambda s: s.start_time or 0)
    assert latest.parent is not None and latest.parent.span_id == retry.context.span_id


@pytest.mark.parametrize(
    "stored",
    [
        "not json at all",
        [1, 2, 3],
        {"traceparent": "00-nothex-00f067aa0ba902b7-01"},
        {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},  # the invalid ids
        {"traceparent": 17},
        {"traceparent": VALID_PARENT, "baggage": "k=" + "v" * 5000},
        {"traceparent": VALID_PARENT + "0" * 10_000},
    ],
)
def test_a_stored_context_that_is_not_one_is_dropped_and_the_job_runs_in_a_trace_of_its_own(
    exported: InMemorySpanExporter, caplog: pytest.LogCaptureFixture, stored: Any
) -> None:
    job = enqueue("test.traced", {})
    Job.objects.filter(id=job.id).update(trace_context=stored)
    caplog.set_level(logging.DEBUG, logger="django_jobs.tracing")

    assert _run_until_done(job).status == JobStatus.COMPLETED

    (execution,) = named(exported, "process default")
    assert execution.parent is None and not execution.links
    assert any(r.getMessage().startswith("stored trace context dropped") for r in caplog.records)


def test_baggage_too_large_to_store_is_dropped_and_the_enqueue_goes_on(
    exported: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_jobs.tracing")
    large = context.get_current()
    for item in ("cart", "wishlist", "history"):  # each entry within W3C's bound, not the whole
        large = baggage.set_baggage(item, "x" * 500, context=large)
    token = context.attach(large)
    try:
        job = enqueue("test.traced", {})
    finally:
        context.detach(token)
    stored = Job.objects.get(id=job.id).trace_context
    assert "traceparent" in stored and "baggage" not in stored
    assert any("baggage of" in r.getMessage() for r in caplog.records)


def test_small_baggage_travels_with_the_job_to_its_execution(exported: InMemorySpanExporter) -> None:
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        job = enqueue("test.traced", {})
    finally:
        context.detach(token)
    assert Job.objects.get(id=job.id).trace_context["baggage"] == "tenant=acme"


def test_the_handler_runs_with_the_baggage_of_the_request_that_enqueued_it(
    exported: InMemorySpanExporter,
) -> None:
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        job = enqueue("test.traced", {})
    finally:
        context.detach(token)
    assert baggage.get_all() == {}  # the worker's own context holds none

    assert _run_until_done(job).status == JobStatus.COMPLETED
    (handler,) = named(exported, "charge card")
    assert handler.attributes is not None and dict(handler.attributes) == {"baggage.tenant": "acme"}
    assert baggage.get_all() == {}  # and none is left behind once the job is done


class Raising(SpanProcessor):
    """A user's span processor that fails at every start and end."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("the span processor is broken")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("the span processor is broken")


def test_a_span_processor_that_raises_fails_no_enqueue_and_no_job(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK calls span processors synchronously at each span's start and end: ours are
    guarded (a handler's own spans are the handler's to guard)."""
    provider.add_span_processor(Raising())
    job = enqueue("test.flaky", {"succeed_on": 2})
    assert _run_until_done(job).status == JobStatus.COMPLETED
    assert Job.objects.get(id=job.id).attempts == 2
    assert any("a span processor failed" in r.getMessage() for r in caplog.records)


def test_a_jobs_page_shows_its_trace_id_and_nothing_for_a_context_that_is_not_one(
    exported: InMemorySpanExporter, admin_client: Any
) -> None:
    from django.urls import reverse

    traced = enqueue("test.traced", {})
    (send,) = named(exported, "send default")
    page = admin_client.get(reverse("admin:django_jobs_job_change", args=[traced.id]))
    assert f"{send.context.trace_id:032x}" in page.content.decode()

    garbage = enqueue("test.traced", {})
    Job.objects.filter(id=garbage.id).update(trace_context={"traceparent": "<script>alert(1)</script>"})
    page = admin_client.get(reverse("admin:django_jobs_job_change", args=[garbage.id]))
    assert page.status_code == 200 and "<script>alert(1)" not in page.content.decode()


def test_a_workflows_members_are_children_of_its_enqueue(exported: InMemorySpanExporter) -> None:
    from django_jobs import Step, enqueue_chain

    with trace.get_tracer("test").start_as_current_span("POST /reports"):
        workflow = enqueue_chain(Step("test.traced", {}), Step("test.traced", {}))
    (send,) = named(exported, "send default")
    assert send.attributes is not None and send.attributes["django_jobs.job.type"] == "workflow:chain"
    members = list(Job.objects.filter(workflow_id=workflow.id))
    assert len(members) == 2 and all(m.trace_context == members[0].trace_context for m in members)
    run_one(types=["test.traced"])
    (execution,) = named(exported, "process default")
    assert execution.parent is not None and execution.parent.span_id == send.context.span_id
