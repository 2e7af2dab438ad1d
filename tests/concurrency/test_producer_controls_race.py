"""Two enqueues of one key in parallel transactions, on their own connections: ``unique_for`` and
``debounce`` give exactly one job, whichever commits first (the advisory lock of the key makes
the second wait for the first's commit, then read what it wrote)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models.functions import Now

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.states import JobStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 20


def race_in_transactions(
    attempt: Callable[[int], Job], hold: float = 0.05, returned_at: list[float] | None = None
) -> list[Job]:
    """Run ``attempt(i)`` on two threads, each in a transaction of its own connection, released
    at the same instant; each holds its transaction open ``hold`` seconds after its enqueue, so
    that the other's enqueue runs while the first has not committed. ``returned_at`` gets the
    monotonic time each enqueue returned."""
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]
    times = returned_at if returned_at is not None else [0.0, 0.0]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier: race the enqueue
            barrier.wait(timeout=10)
            with transaction.atomic():
                results[i] = attempt(i)
                times[i] = time.monotonic()
                time.sleep(hold)  # the transaction stays open: the race is against its commit
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return results


def test_two_enqueues_racing_with_unique_for_make_exactly_one_job() -> None:
    for n in range(ROUNDS):
        key = f"sync:{n}"
        jobs = race_in_transactions(
            lambda i, key=key: enqueue("test.noop", {"by": i}, unique_key=key, unique_for=600)
        )
        assert jobs[0].id == jobs[1].id, f"round {n}: two jobs"
        assert Job.objects.filter(unique_key=key).count() == 1


def test_two_enqueues_racing_after_the_job_ended_still_make_exactly_one_job() -> None:
    """The key's job ended (the unique index no longer holds it): only the lock and the window
    keep the second enqueue from making a job."""
    for n in range(ROUNDS):
        key = f"sync:{n}"
        ended = enqueue("test.noop", {}, unique_key=key)
        Job.objects.filter(id=ended.id).update(
            status=JobStatus.COMPLETED, finished_at=Now(), completed_at=Now(), unique_key=None
        )
        jobs = race_in_transactions(
            lambda i, key=key: enqueue("test.noop", {"by": i}, unique_key=key, unique_for=600)
        )
        assert jobs[0].id == jobs[1].id, f"round {n}: two jobs"
        assert Job.objects.filter(unique_key=key).count() == 1


def test_two_debounced_enqueues_racing_make_one_job_with_the_later_payload() -> None:
    for n in range(ROUNDS):
        key = f"doc:{n}"
        returned_at = [0.0, 0.0]
        jobs = race_in_transactions(
            lambda i, key=key: enqueue("test.noop", {"by": i}, debounce=30, debounce_key=key),
            returned_at=returned_at,
        )
        assert jobs[0].id == jobs[1].id, f"round {n}: two jobs"
        (job,) = Job.objects.filter(debounce_key=key)
        # The second waited for the first's commit on the key's lock, then updated the job: its
        # enqueue returned last, and its payload is the one kept.
        second = 0 if returned_at[0] > returned_at[1] else 1
        assert abs(returned_at[0] - returned_at[1]) >= 0.04  # it did wait for the other's commit
        assert job.payload == {"by": second} == jobs[second].payload
        assert job.status == JobStatus.PENDING


def test_without_the_controls_the_same_race_makes_two_jobs() -> None:
    """The test can fail: the same race without a key's lock gives two jobs."""
    jobs = race_in_transactions(lambda i: enqueue("test.noop", {"by": i}))
    assert jobs[0].id != jobs[1].id
