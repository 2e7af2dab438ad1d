"""A burst worker stops once a claim that could run found nothing: not after a turn whose claim
declined for want of room, even if the jobs it held finished meanwhile."""

from __future__ import annotations

import time

import pytest

from django_jobs import enqueue_many
from django_jobs.models import Job
from django_jobs.runtime.wakeup import Wakeup
from django_jobs.states import JobStatus
from tests.db.inprocess import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_worker_drains_its_backlog_even_when_its_outlook_is_slow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Jobs of a few milliseconds each: the worker holds a prefetch of them for longer than
    # POLL_INTERVAL, so it reads its outlook (it listens to nothing) while they run.
    enqueue_many("test.sleep", [{"seconds": 0.001}] * 600)
    look_ahead = Wakeup.look_ahead

    def slow(self: Wakeup) -> bool:
        # A slow read of the outlook (a busy server): the jobs held when the claim declined for
        # want of room are all done and written by the time it returns.
        time.sleep(0.6)
        return look_ahead(self)

    monkeypatch.setattr(Wakeup, "look_ahead", slow)
    worker = run_worker()
    left = Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).count()
    assert left == 0, f"stopped ({worker.stop_reason}) with {left} jobs left"
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 600
