"""One trace from an enqueue to the job's last attempt, across real ``runjobs`` processes.

The test process traces with the in-memory exporter (tests/otel_support.py); each worker
process traces to a file of spans (``TRACE_SPANS_FILE``, testproject/span_file.py), as a worker
host would export to a collector. A span ends, and is written, when its execution ends: a
worker killed mid-job leaves no span of that execution.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.otel_support import exported, named, provider
from tests.process.workers import StartWorker, wait_for

__all__ = ["exported", "provider"]  # fixtures, used by name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def spans_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_job_that_fails_once_then_completes_on_a_worker_is_one_trace_with_its_request(
    exported: InMemorySpanExporter, start_worker: StartWorker, tmp_path: Path, pool: str
) -> None:
    """With ``--pool process`` the handler runs in a child process, which sets its provider as
    its parent did (the settings) and gets the stored context with its claim."""
    spans_file = tmp_path / "worker.spans"
    # The request's span stands in for the one Django's instrumentation opens.
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with trace.get_tracer("test").start_as_current_span("POST /checkout") as request:
            job = enqueue("test.traced", {"succeed_on": 2})
    finally:
        context.detach(token)
    worker = start_worker("--pool", pool, env={"TRACE_SPANS_FILE": str(spans_file)})
    wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what="the job to complete")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0

    (send,) = named(exported, "send default")
    trace_id = f"{request.get_span_context().trace_id:032x}"
    send_id = f"{send.context.span_id:016x}"
    found = spans_in(spans_file)
    executions = sorted(
        (s for s in found if s["name"] == "process default"),
        key=lambda s: s["attributes"]["django_jobs.job.attempt"],
    )
    assert [s["attributes"]["django_jobs.job.attempt"] for s in executions] == [1, 2]
    for execution in executions:
        assert (execution["trace_id"], execution["parent_id"], execution["links"]) == (
            trace_id,
            send_id,
            [send_id],
        )
        assert execution["kind"] == "CONSUMER"
        assert (execution["pid"] == worker.pid) == (pool == "thread")  # else the child's
        assert execution["attributes"]["messaging.message.id"] == str(job.id)
    first, second = executions
    assert (first["attributes"]["django_jobs.outcome"], first["status"]) == ("retryable", "ERROR")
    assert first["attributes"]["django_jobs.error.code"] == "PROVIDER_5XX"
    assert (second["attributes"]["django_jobs.outcome"], second["status"]) == ("completed", "UNSET")
    # The handler's own span of each attempt is a child of that attempt's.
    handler_spans = [s for s in found if s["name"] == "charge card"]
    assert sorted(s["parent_id"] for s in handler_spans) == sorted(s["span_id"] for s in executions)
    assert {s["trace_id"] for s in handler_spans} == {trace_id}
    # Each attempt's handler ran with the request's baggage, in the worker or in its child.
    assert [s["attributes"].get("baggage.tenant") for s in handler_spans] == ["acme", "acme"]


def test_the_attempt_after_a_killed_worker_and_the_reapers_recovery_is_a_child_of_the_same_enqueue(
    exported: InMemorySpanExporter, start_worker: StartWorker, tmp_path: Path
) -> None:
    with trace.get_tracer("test").start_as_current_span("POST /checkout"):
        job = enqueue("test.traced", {"pause": 30})
    (send,) = named(exported, "send default")
    killed_file, second_file = tmp_path / "killed.spans", tmp_path / "second.spans"
    killed = start_worker(env={"TRACE_SPANS_FILE": str(killed_file)})
    wait_for(lambda: Job.objects.get(id=job.id).attempts == 1, what="the first attempt to start")
    killed.kill()
    Job.objects.filter(id=job.id).update(payload={"pause": 0})  # the next attempt ends at once

    second = start_worker(env={"TRACE_SPANS_FILE": str(second_file)})
    wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what="recovery and completion")
    second.send(signal.SIGTERM)
    assert second.wait() == 0

    assert JobEvent.objects.filter(job_id=job.id, kind=EventKind.RECOVERED).exists()
    assert not [s for s in spans_in(killed_file) if s["name"] == "process default"]  # died with it
    (execution,) = [s for s in spans_in(second_file) if s["name"] == "process default"]
    assert execution["attributes"]["django_jobs.job.attempt"] == 2
    assert execution["trace_id"] == f"{send.context.trace_id:032x}"
    assert execution["parent_id"] == f"{send.context.span_id:016x}"
