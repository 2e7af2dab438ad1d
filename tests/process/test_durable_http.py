"""The order flow over HTTP, on a real worker: a view enqueues "charge → wait for `paid` → ship →
sleep 3 s → e-mail", and a second request, the payment provider's webhook, signals it.

The signal sent before the wait; the timeout path; a signal whose transaction rolled back was
never delivered; an unknown key is refused."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from django_jobs.models import Job, JobSignal
from django_jobs.states import JobStatus
from django_jobs.testing import recorded_steps, where
from testproject.testjobs.models import EffectLog
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker(worker_env: dict[str, str]) -> Iterator[WorkerProcess]:
    process = WorkerProcess(worker_env)
    yield process
    process.send(signal.SIGTERM)
    process.wait()
    process.stop()


def order(client: Client, number: int, **options: Any) -> Job:
    response = client.post("/durable/orders/", {"order": number, **options}, content_type="application/json")
    assert response.status_code == 201
    return Job.objects.get(id=response.json()["job"])


def webhook(client: Client, intent: int, **body: Any) -> Any:
    return client.post(
        "/durable/webhooks/payment/",
        {"intent": intent, "amount": 1200, **body},
        content_type="application/json",
    )


def effects(number: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in EffectLog.objects.filter(key__startswith=f"order{number}:").values_list("key", flat=True):
        counts[key.split(":", 1)[1]] = counts.get(key.split(":", 1)[1], 0) + 1
    return counts


def waiting_for_payment(job: Job) -> bool:
    parked = where(job)
    return parked is not None and (parked.kind, parked.name, parked.key) == (
        "wait",
        "paid",
        f"pay:{job.payload['run'][5:]}",
    )


def status(job: Job) -> str:
    return Job.objects.get(id=job.id).status


def test_the_webhook_signals_the_waiting_order_which_ships_sleeps_and_mails_each_once(
    worker: WorkerProcess,
) -> None:
    client = Client()
    job = order(client, 1, sleep=3)
    wait_for(lambda: waiting_for_payment(job), what="the order to wait for its payment")
    assert effects(1) == {"charge": 1}
    assert webhook(client, 1).json() == {"stored": True}
    wait_for(lambda: status(job) == JobStatus.COMPLETED, timeout=30, what="the order to complete")
    ended = Job.objects.get(id=job.id)
    assert ended.return_value == {"paid": {"amount": 1200}}
    assert effects(1) == {"charge": 1, "ship": 1, "email": 1}
    steps = {s.name: s for s in recorded_steps(job)}
    assert [s.state for s in steps.values()] == ["done", "signalled", "done", "slept", "done"]
    # The e-mail went out no sooner than three seconds after the shipping, by the database's clock.
    assert (steps["email"].created_at - steps["ship"].created_at).total_seconds() >= 3
    assert ended.attempts == 1  # neither the wait nor the sleep used an attempt


def test_a_signal_sent_before_the_job_reaches_its_wait_is_kept(worker_env: dict[str, str]) -> None:
    client = Client()
    job = order(client, 2, sleep=0)
    assert webhook(client, 2).json() == {"stored": True}  # no worker has run the job yet
    assert webhook(client, 2).json() == {"stored": False}  # the provider's retry: the first stands
    process = WorkerProcess(worker_env)
    try:
        wait_for(lambda: status(job) == JobStatus.COMPLETED, what="the order to complete")
    finally:
        process.send(signal.SIGTERM)
        process.wait()
        process.stop()
    assert effects(2) == {"charge": 1, "ship": 1, "email": 1}
    assert [s.state for s in recorded_steps(job)][1] == "signalled"


def test_an_order_nobody_pays_times_out_and_is_cancelled(worker: WorkerProcess) -> None:
    client = Client()
    job = order(client, 3, timeout=1)
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="the wait to time out")
    assert Job.objects.get(id=job.id).return_value == {"cancelled": True}
    assert effects(3) == {"charge": 1, "cancel": 1}
    assert [s.state for s in recorded_steps(job)] == ["done", "timed out", "done"]


def test_a_signal_rolled_back_with_the_webhooks_transaction_is_never_delivered(worker: WorkerProcess) -> None:
    client = Client()
    job = order(client, 4, sleep=0)
    wait_for(lambda: waiting_for_payment(job), what="the order to wait for its payment")
    assert webhook(client, 4, fail_after_signal=True).status_code == 500
    assert not JobSignal.objects.filter(job=job).exists()
    assert waiting_for_payment(job) and status(job) == JobStatus.PENDING
    assert effects(4) == {"charge": 1}
    assert webhook(client, 4).json() == {"stored": True}  # the provider's retry, which commits
    wait_for(lambda: status(job) == JobStatus.COMPLETED, what="the order to complete")
    assert effects(4) == {"charge": 1, "ship": 1, "email": 1}


def test_a_webhook_for_an_unknown_payment_is_refused() -> None:
    assert webhook(Client(), 999).status_code == 404
    assert not JobSignal.objects.exists()
