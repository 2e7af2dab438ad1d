"""``enqueued_jobs()`` and ``assert_enqueued()``: what a view enqueued, seen without the queue,
with the view's transaction deciding, and failure messages that say what was enqueued instead."""

from __future__ import annotations

import datetime as dt
import threading
from unittest.mock import ANY

import pytest
from django.db import connections, transaction
from django.test import TestCase, TransactionTestCase
from django.urls import reverse
from django.utils import timezone

from django_jobs import enqueue, enqueue_many
from django_jobs.errors import InvalidPayload
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.testing import assert_enqueued, enqueued_jobs, run_one
from testproject.shop.jobs import charge_order
from testproject.shop.models import Order
from testproject.testjobs import tasks


class AViewThatEnqueues(TestCase):
    def test_what_the_view_enqueued_is_recorded_and_not_written(self) -> None:
        with enqueued_jobs() as captured:
            response = self.client.post(reverse("checkout"), {"amount_cents": 2500})
        assert response.status_code == 201
        order = Order.objects.get(id=response.json()["order_id"])  # the view's own write stands
        captured.assert_enqueued("shop.charge_order", payload={"order_id": order.id})
        captured.assert_enqueued(charge_order, payload={"order_id": order.id}, count=1, queue="default")
        (enqueued,) = captured
        assert (enqueued.type, enqueued.queue, enqueued.priority, enqueued.delay) == (
            "shop.charge_order", "default", 0, 0.0,
        )  # fmt: skip
        assert enqueued.job.pk is None  # returned unsaved
        assert not Job.objects.exists()  # the queue is as it was
        assert run_one() is None

    def test_with_insert_the_jobs_are_written_too_and_can_be_run(self) -> None:
        with enqueued_jobs(insert=True) as captured:
            response = self.client.post(reverse("checkout"), {"amount_cents": 1200})
        (enqueued,) = captured.assert_enqueued("shop.charge_order", payload={"order_id": ANY})
        assert enqueued.job.pk is not None and Job.objects.get().id == enqueued.job.pk
        ran = run_one()
        assert ran is not None and ran.status == JobStatus.COMPLETED
        assert Order.objects.get(id=response.json()["order_id"]).status == Order.Status.PAID

    def test_an_enqueue_rolled_back_with_its_transaction_is_not_recorded(self) -> None:
        with enqueued_jobs() as captured:
            with transaction.atomic():
                enqueue("test.noop", {"kept": True})
            with pytest.raises(RuntimeError), transaction.atomic():
                enqueue("test.noop", {"kept": False})
                raise RuntimeError("the view failed after enqueueing")
        assert [job.payload for job in captured] == [{"kept": True}]
        captured.assert_enqueued("test.noop", count=1)

    def test_options_and_many_jobs_are_recorded_as_asked(self) -> None:
        at = timezone.now() + dt.timedelta(hours=1)
        with enqueued_jobs() as captured:
            enqueue("test.noop", {"n": 1}, queue="emails", priority=7, delay=30, unique_key="u1")
            enqueue("test.noop", {"n": 2}, run_at=at, max_attempts=2)
            enqueue_many("test.record", [{"key": "a"}, {"key": "b"}])
        assert len(captured) == 4 and len(captured.of("test.record")) == 2
        first, second = captured.of("test.noop")
        assert (first.queue, first.priority, first.delay, first.unique_key, first.run_at) == (
            "emails", 7, 30.0, "u1", None,
        )  # fmt: skip
        assert (second.run_at, second.max_attempts) == (at, 2)
        assert_enqueued("test.record", count=2, captured=captured)
        captured.assert_enqueued("test.noop", {"n": 1}, priority=7, unique_key="u1")

    def test_bad_input_still_raises_before_anything_is_recorded(self) -> None:
        with enqueued_jobs() as captured, pytest.raises(InvalidPayload):
            enqueue("test.noop", {"when": timezone.now()})
        assert len(captured) == 0

    def test_assert_enqueued_without_captured_uses_the_open_block(self) -> None:
        with enqueued_jobs():
            enqueue("test.noop", {"n": 1})
            assert_enqueued("test.noop", {"n": 1})
            with enqueued_jobs() as inner:
                enqueue("test.record", {"key": "x"})
                assert_enqueued("test.record")  # the innermost block
            assert len(inner) == 1
            assert_enqueued("test.record", count=1)  # outer blocks see inner ones' jobs too
        with pytest.raises(RuntimeError, match="needs an open `with enqueued_jobs\\(\\):` block"):
            assert_enqueued("test.noop")

    def test_jobs_enqueued_on_other_threads_are_recorded(self) -> None:
        def enqueue_from_a_thread() -> None:
            try:
                enqueue("test.noop", {"from": "thread"})
            finally:
                connections.close_all()

        with enqueued_jobs(insert=False) as captured:
            thread = threading.Thread(target=enqueue_from_a_thread)
            thread.start()
            thread.join()
        captured.assert_enqueued("test.noop", {"from": "thread"})


class FailureMessages(TestCase):
    def test_nothing_enqueued(self) -> None:
        with enqueued_jobs() as captured:
            pass
        with pytest.raises(AssertionError) as failure:
            captured.assert_enqueued("shop.charge_order")
        assert str(failure.value) == (
            "expected a job of type 'shop.charge_order'; 0 enqueued.\nNothing was enqueued in this block."
        )

    def test_other_jobs_are_listed(self) -> None:
        with enqueued_jobs() as captured:
            enqueue("shop.charge_order", {"order_id": 8})
            enqueue("test.noop", {}, queue="emails", priority=3, delay=5)
        with pytest.raises(AssertionError) as failure:
            captured.assert_enqueued("shop.charge_order", payload={"order_id": 7})
        assert str(failure.value) == (
            "expected a job of type 'shop.charge_order' with payload {'order_id': 7}; 0 enqueued.\n"
            "Enqueued in this block (2):\n"
            "  - shop.charge_order {'order_id': 8} (queue='default')\n"
            "  - test.noop {} (queue='emails', priority=3, delay=5.0)"
        )

    def test_a_wrong_count_and_options(self) -> None:
        with enqueued_jobs() as captured:
            enqueue("test.noop", {"n": 1})
            enqueue("test.noop", {"n": 1})
        with pytest.raises(
            AssertionError,
            match=r"^expected 1 job\(s\) of type 'test.noop' with payload \{'n': 1\}; 2 enqueued",
        ):
            captured.assert_enqueued("test.noop", {"n": 1}, count=1)
        with pytest.raises(AssertionError, match=r"and queue='emails'; 0 enqueued"):
            captured.assert_enqueued("test.noop", queue="emails")
        with pytest.raises(TypeError, match="unknown option"):
            captured.assert_enqueued("test.noop", colour="blue")


class DjangoTasks(TransactionTestCase):
    def test_a_task_enqueued_through_jobs_backend_is_recorded(self) -> None:
        with enqueued_jobs() as captured:
            result = tasks.add.enqueue(2, 3)
        captured.assert_enqueued(tasks.add, payload={"args": [2, 3], "kwargs": {}}, count=1)
        assert result.id.startswith("unsaved-") and not Job.objects.exists()
        with enqueued_jobs(insert=True) as captured:
            result = tasks.add.enqueue(4, 5)
        (enqueued,) = captured.assert_enqueued("testproject.testjobs.tasks.add")
        assert result.id == str(enqueued.job.pk) and Job.objects.get().payload["args"] == [4, 5]
