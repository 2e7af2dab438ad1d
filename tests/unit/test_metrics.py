"""A worker's execution metrics as a scrape reads them."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_jobs.decision import Happened
from django_jobs.observe.metrics import RUN_BUCKETS, Metrics
from django_jobs.runtime.executor import Finished
from django_jobs.transitions import Claim, Outcome


def claim(type_name: str = "emails.send", queue: str = "emails", waited: float = 0.5) -> Claim:
    return Claim(
        1, queue, type_name, 1, "{}", 1, 5, uuid.uuid4(), None, None, 0, None, "retry", True, 0.0, waited
    )


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_outcomes_are_counted_by_type_queue_and_code(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    c = claim()
    for status, event, code in [
        ("completed", None, None),
        ("completed", None, None),
        ("pending", "retry_scheduled", "PROVIDER_5XX"),
        ("failed", "failed", "ENTITY_NOT_FOUND"),
        ("cancelled", "cancelled", None),
        ("skipped", "skipped", None),
    ]:
        metrics.on_started(c)
        metrics.on_finished(
            Finished(c, Happened.COMPLETED, ran_for=0.2), Outcome(1, c.execution_id, status, event=event,
                                                                 error_code=code)
        )  # fmt: skip
    metrics.on_finished(Finished(c, Happened.COMPLETED, ran_for=0.1), None)  # its lease was lost
    # Given back unstarted: not an execution at all.
    metrics.on_finished(Finished(c, Happened.NOT_STARTED), Outcome(1, c.execution_id, "pending"))
    got = samples(registry)
    labels = (("queue", "emails"), ("type", "emails.send"))
    assert got[("django_jobs_started_total", labels)] == 6
    assert got[("django_jobs_completed_total", labels)] == 2
    assert got[("django_jobs_cancelled_total", labels)] == 1
    assert got[("django_jobs_skipped_total", labels)] == 1
    assert got[("django_jobs_lost_total", labels)] == 1
    assert got[("django_jobs_retried_total", (("code", "PROVIDER_5XX"), *labels))] == 1
    assert got[("django_jobs_failed_total", (("code", "ENTITY_NOT_FOUND"), *labels))] == 1
    assert got[("django_jobs_run_seconds_count", labels)] == 7
    assert got[("django_jobs_run_seconds_sum", labels)] == pytest.approx(6 * 0.2 + 0.1)
    assert got[("django_jobs_queue_wait_seconds_count", labels)] == 6


def test_histogram_buckets_are_cumulative_and_a_bound_holds_its_own_value(
    registry: CollectorRegistry,
) -> None:
    metrics = Metrics(registry)
    c = claim()
    for ran_for in (0.005, 0.0051, 7200.0):
        metrics.on_finished(
            Finished(c, Happened.COMPLETED, ran_for=ran_for), Outcome(1, c.execution_id, "completed")
        )
    got = samples(registry)
    labels = (("queue", "emails"), ("type", "emails.send"))

    def bucket(le: str) -> float:
        return got[("django_jobs_run_seconds_bucket", (("le", le), *labels))]

    assert bucket("0.005") == 1  # le is "less than or equal"
    assert bucket("0.01") == 2
    assert bucket(str(float(RUN_BUCKETS[-1]))) == 2
    assert bucket("+Inf") == 3


def test_a_negative_wait_from_clock_skew_counts_as_none(registry: CollectorRegistry) -> None:
    metrics = Metrics(registry)
    metrics.on_started(claim(waited=-0.002))
    got = samples(registry)
    labels = (("queue", "emails"), ("type", "emails.send"))
    assert got[("django_jobs_queue_wait_seconds_sum", labels)] == 0


def test_each_label_keeps_its_first_values_and_counts_later_ones_as_other(
    registry: CollectorRegistry,
) -> None:
    metrics = Metrics(registry, max_label_values=3)
    for n in range(10):
        c = claim(queue=f"tenant-{n}")  # a queue per tenant: a caller's choice
        metrics.on_started(c)
        outcome = Outcome(1, c.execution_id, "failed", event="failed", error_code=f"ORDER_{n}_NOT_FOUND")
        metrics.on_finished(Finished(c, Happened.COMPLETED, ran_for=0.1), outcome)
    metrics.on_enqueued("emails.send", "tenant-9", 2)
    got = samples(registry)
    started = {
        dict(labels)["queue"]: v for (name, labels), v in got.items() if name == "django_jobs_started_total"
    }
    assert started == {"tenant-0": 1, "tenant-1": 1, "tenant-2": 1, "other": 7}
    failed = {
        (dict(labels)["queue"], dict(labels)["code"]): v
        for (name, labels), v in got.items()
        if name == "django_jobs_failed_total"
    }
    assert failed == {
        ("tenant-0", "ORDER_0_NOT_FOUND"): 1,
        ("tenant-1", "ORDER_1_NOT_FOUND"): 1,
        ("tenant-2", "ORDER_2_NOT_FOUND"): 1,
        ("other", "other"): 7,
    }
    assert got[("django_jobs_run_seconds_count", (("queue", "other"), ("type", "emails.send")))] == 7
    assert got[("django_jobs_enqueued_total", (("queue", "other"), ("type", "emails.send")))] == 2


def test_jobs_expired_are_counted_by_who_ended_them_and_not_as_lost(registry: CollectorRegistry) -> None:
    from django_jobs.errors import ErrorCode
    from django_jobs.maintenance.reaper import ReapResult

    metrics = Metrics(registry)
    c = claim()
    metrics.on_finished(Finished(c, None, ErrorCode.EXPIRED), None)  # ended by its start
    metrics.on_reaped(ReapResult(expired=[("emails.send", "emails"), ("emails.send", "emails")]))
    got = samples(registry)
    assert got[("django_jobs_expired_total", (("by", "worker"), ("type", "emails.send")))] == 1
    assert got[("django_jobs_expired_total", (("by", "reaper"), ("type", "emails.send")))] == 2
    assert ("django_jobs_lost_total", (("queue", "emails"), ("type", "emails.send"))) not in got
