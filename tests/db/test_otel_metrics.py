"""Metrics through OpenTelemetry (django_jobs/observe/otel_metrics.py), read with the SDK's
in-memory reader: a worker's events, the enqueues, and the per-queue gauges."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics._internal.exemplar import ExemplarFilter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.util._once import Once

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.observe import metrics
from django_jobs.observe.otel_metrics import observe_queues
from django_jobs.states import JobStatus
from django_jobs.testing import run_durable, run_jobs
from testproject.testjobs.models import BusinessRow
from tests.db.inprocess import run_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _forget_provider() -> None:
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    made = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[made])
    _forget_provider()
    metrics_internal.set_meter_provider(provider)
    yield made
    provider.shutdown()
    _forget_provider()


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point collected now, by instrument name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _sum(found: dict[str, list[Any]], name: str, **attributes: str) -> float:
    return sum(p.value for p in found.get(name, []) if attributes.items() <= dict(p.attributes).items())


def test_without_a_meter_provider_nothing_is_recorded() -> None:
    assert metrics.otel_recorder() is None
    enqueue("test.noop", {})  # and the enqueue goes on


def test_a_workers_executions_and_the_enqueues_are_counted(reader: InMemoryMetricReader) -> None:
    for _ in range(3):
        enqueue("test.noop", {}, queue="mail")
    enqueue("test.permanent", {}, queue="mail")
    run_jobs(queues=["mail"])

    found = points(reader)
    mail = {"messaging.system": "django_jobs", "messaging.destination.name": "mail"}
    assert _sum(found, "messaging.client.sent.messages", **mail, **{"django_jobs.job.type": "test.noop"}) == 3
    assert _sum(found, "messaging.client.sent.messages", **mail) == 4
    assert _sum(found, "messaging.client.consumed.messages", **mail) == 4
    assert _sum(found, "django_jobs.executions.ended", **{"django_jobs.status": "completed"}) == 3
    failed = {"django_jobs.status": "failed", "error.type": "ENTITY_NOT_FOUND"}
    assert _sum(found, "django_jobs.executions.ended", **failed) == 1
    assert sum(p.count for p in found["messaging.process.duration"]) == 4
    assert sum(p.count for p in found["django_jobs.queue.wait"]) == 4


def test_the_queues_gauges_read_the_dashboards_figures(reader: InMemoryMetricReader) -> None:
    later = dt.timedelta(hours=1)
    for _ in range(2):
        enqueue("test.noop", {}, queue="reports", delay=later)
    enqueue("test.noop", {}, queue="reports")
    observe_queues()

    found = points(reader)
    reports = {"messaging.destination.name": "reports"}
    assert _sum(found, "django_jobs.queue.pending", **reports) == 3
    assert _sum(found, "django_jobs.queue.due", **reports) == 1
    assert _sum(found, "django_jobs.queue.paused", **reports) == 0
    assert {name for name in found if name.startswith("django_jobs.queue.")} >= {
        "django_jobs.queue.running", "django_jobs.queue.failed", "django_jobs.queue.oldest_due_seconds",
    }  # fmt: skip


def test_the_durable_jobs_gauges_read_the_dashboards_counts(reader: InMemoryMetricReader) -> None:
    run_durable(enqueue("test.durable", {"run": "o1", "script": [["sleep", 3600]]}))
    run_durable(enqueue("test.durable", {"run": "o2", "script": [["wait", "paid", 3600]]}, signal_key="o:2"))
    run_durable(enqueue("test.durable", {"run": "o3", "script": [["wait", "paid", 3600]]}, signal_key="o:3"))
    observe_queues()

    found = points(reader)
    assert _sum(found, "django_jobs.durable.jobs", **{"django_jobs.durable.state": "sleeping"}) == 1
    assert _sum(found, "django_jobs.durable.jobs", **{"django_jobs.durable.state": "waiting"}) == 2
    assert "django_jobs.durable.waits_overdue" in found
    assert _sum(found, "django_jobs.durable.waits_overdue") == 0


def test_the_commands_refuse_queue_gauges_without_a_meter_provider_and_run_nothing() -> None:
    job = enqueue("test.noop", {})
    for command in (["runjobs", "--burst"], ["reapjobs", "--loop"]):
        with pytest.raises(CommandError, match="--otel-queue-gauges needs a meter provider, set before"):
            call_command(*command, "--otel-queue-gauges")
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING


def test_the_commands_refuse_queue_gauges_where_they_cannot_be_reported(reader: InMemoryMetricReader) -> None:
    with pytest.raises(CommandError, match="needs --loop: a single pass ends before any export"):
        call_command("reapjobs", "--otel-queue-gauges")
    with pytest.raises(CommandError, match="--otel-queue-gauges or --metrics-port"):
        call_command("runjobs", "--burst", "--otel-queue-gauges", "--metrics-port", "0")
    assert reader.get_metrics_data() is None  # no gauge registered, nothing recorded


class _RaisingFilter(ExemplarFilter):
    """An exemplar filter with a bug: the SDK calls it on every measurement, synchronously."""

    def should_sample(self, value: Any, time_unix_nano: int, attributes: Any, context: Any) -> bool:
        raise RuntimeError("exemplar filter bug token=s3cr3t-t0ken")


@pytest.fixture
def raising_meter() -> Iterator[None]:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()], exemplar_filter=_RaisingFilter())
    _forget_provider()
    metrics_internal.set_meter_provider(provider)
    yield
    provider.shutdown()
    _forget_provider()


def test_a_meter_that_raises_fails_no_enqueue_and_is_logged_once(
    raising_meter: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_jobs.metrics")
    metrics._failures_seen.clear()
    first = enqueue("test.noop", {})
    second = enqueue("test.noop", {})

    assert set(Job.objects.values_list("id", flat=True)) == {first.id, second.id}
    warnings = [r for r in caplog.records if r.name == "django_jobs.metrics" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "exemplar filter bug" in warnings[0].getMessage()
    assert "s3cr3t-t0ken" not in caplog.text  # sanitized, as a stored error is


def test_a_meter_that_raises_fails_no_job_and_stops_no_writer(
    raising_meter: None, caplog: pytest.LogCaptureFixture
) -> None:
    # Written as rows: the enqueue's own recording is the test above.
    jobs = [JobFactory(type="test.record", payload={"key": f"r{i}"}, max_attempts=2) for i in range(3)]
    worker = run_worker()

    assert BusinessRow.objects.filter(key__in=["r0", "r1", "r2"]).count() == 3  # every handler ran
    for job in jobs:
        stored = Job.objects.get(id=job.id)
        assert (stored.status, stored.attempts, stored.last_error) == (JobStatus.COMPLETED, 1, None)
    assert worker.stats.outcomes[JobStatus.COMPLETED] == 3
    assert "the outcome writer stopped" not in caplog.text
