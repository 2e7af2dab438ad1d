"""``ctx.idempotency_key``: anchored on the business operation, or on the job."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import transaction

from django_jobs import JobContext, enqueue, job
from django_jobs.models import Job
from django_jobs.registry import registry
from django_jobs.runtime.lease import Lease
from django_jobs.states import JobStatus
from django_jobs.testing import run_until_settled
from testproject.shop.models import Charge, Order, Receipt


def context(job_id: int, unique_key: str | None = None, attempt: int = 1) -> JobContext:
    return JobContext(
        job_id=job_id,
        type="shop.charge_order",
        queue="default",
        attempt=attempt,
        max_attempts=5,
        execution_id=uuid.uuid4(),
        unique_key=unique_key,
        lease=Lease(job_id, uuid.uuid4(), 60.0),
    )


def test_an_anchored_key_names_the_operation_not_the_job() -> None:
    keys = {
        context(job_id, attempt=attempt).idempotency_key("capture", anchor="order:7")
        for job_id in (1, 2)
        for attempt in (1, 3)
    }
    assert keys == {"shop.charge_order:order:7:capture"}


def test_an_anchor_wins_over_the_unique_key() -> None:
    assert context(1, unique_key="batch:3").idempotency_key(anchor="order:7") == "shop.charge_order:order:7"


def test_without_an_anchor_two_jobs_send_two_keys_unless_they_share_a_unique_key() -> None:
    # The two consequences the docs state: keyed on the job id, two jobs for one order differ;
    # keyed on a unique key, every later job with that key reuses it.
    assert context(1).idempotency_key() != context(2).idempotency_key()
    assert context(1, "order:7").idempotency_key() == context(2, "order:7").idempotency_key()


@pytest.mark.parametrize("anchor", ["", "   ", 7, b"order:7"])
def test_an_anchor_that_names_nothing_is_refused(anchor: Any) -> None:
    with pytest.raises(ValueError, match="anchor must be a non-empty string"):
        context(1).idempotency_key(anchor=anchor)


@pytest.mark.django_db(transaction=True)
def test_two_jobs_charging_one_order_make_one_charge() -> None:
    # A double click: two jobs for one order, no unique_key. Each job's first answer is lost,
    # so the charge is made by its first attempt and asked for again by its retry.
    with transaction.atomic():
        order = Order.objects.create(amount_cents=2500)
        first = enqueue("shop.charge_order", {"order_id": order.id, "simulate_lost_answer": True})
        second = enqueue("shop.charge_order", {"order_id": order.id, "simulate_lost_answer": True})

    run_until_settled(timeout=60)

    charge = Charge.objects.get()
    assert charge.idempotency_key == f"shop.charge_order:order:{order.id}"
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.charge_id == charge.id
    assert Receipt.objects.filter(order=order).count() == 1
    jobs = Job.objects.filter(id__in=[first.id, second.id])
    assert {j.status for j in jobs} == {JobStatus.COMPLETED}
    assert sorted(j.attempts for j in jobs) == [1, 2]  # only the job whose answer was lost retried


@pytest.mark.django_db(transaction=True)
def test_jobs_keyed_on_their_id_charge_one_order_twice() -> None:
    # Why the anchor matters: the same handler with the job-id key charges a double click twice.
    @job("docs.charge_by_job_id")
    def charge_by_job_id(ctx: JobContext, payload: dict[str, Any]) -> None:
        order = Order.objects.get(id=payload["order_id"])
        Charge.objects.get_or_create(idempotency_key=ctx.idempotency_key(), amount_cents=order.amount_cents)

    try:
        order = Order.objects.create(amount_cents=2500)
        for _ in range(2):
            enqueue(charge_by_job_id, {"order_id": order.id})
        run_until_settled(timeout=30)
        assert Charge.objects.count() == 2
    finally:
        registry.unregister("docs.charge_by_job_id")
