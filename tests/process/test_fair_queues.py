"""A worker serving several queues lets them take turns: a backlog in one never holds back a
job of another by more than what the worker already holds (its running jobs and a prefetch of
at most PREFETCH_SECONDS of work)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from django.db import connection

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.transitions import ClaimStatement, claim
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
Runjobs = Callable[..., subprocess.CompletedProcess[str]]


def backlog(queue: str, count: int, seconds: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, available_at) SELECT %s, 'test.sleep', 1,"
            " jsonb_build_object('seconds', %s::float), 'pending', 0, 0, 5, now() - interval '1 hour'"
            " FROM generate_series(1, %s)",
            [queue, seconds, count],
        )
        cursor.execute("ANALYZE django_jobs_job")


def test_queues_take_turns_in_one_claim_and_from_one_claim_to_the_next() -> None:
    backlog("bulk", 10, 0)
    urgent = [enqueue("test.noop", {}, queue="urgent") for _ in range(3)]
    statement = ClaimStatement("w", ["bulk", "urgent"], {"test.sleep": 1, "test.noop": 1})
    first = claim(statement, 4, turn=0)
    # The bulk jobs are an hour older: before, the claim took them all first.
    assert [c.queue for c in first] == ["bulk", "urgent", "bulk", "urgent"]
    second = claim(statement, 1, turn=1)
    assert [c.id for c in second] == [urgent[2].id]  # urgent's turn
    capped = claim(statement, 5, rooms=[2, 0], turn=0)
    assert [c.queue for c in capped] == ["bulk", "bulk"]  # urgent has no room left


def test_a_backlog_in_one_queue_does_not_hold_back_another(worker_env: dict[str, str]) -> None:
    backlog("bulk", 20_000, 0.01)  # 200 s of work for one slot
    worker = WorkerProcess(worker_env, "--queue", "bulk", "--queue", "urgent")
    try:
        wait_for(
            lambda: Job.objects.filter(queue="bulk", status=JobStatus.COMPLETED).count() > 20,
            what="bulk work",
        )
        delays = []
        for _ in range(5):
            job = enqueue("test.noop", {}, queue="urgent")
            wait_for(lambda job=job: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what="urgent")
            done = Job.objects.get(id=job.id)
            assert done.started_at is not None
            delays.append((done.started_at - done.created_at).total_seconds())
        # One running 10 ms job and at most PREFETCH_SECONDS (50 ms) of claimed ones ahead of it.
        assert max(delays) < 0.5, delays
        assert Job.objects.filter(queue="bulk", status=JobStatus.PENDING).count() > 15_000
    finally:
        worker.stop()


def test_slots_per_queue_are_given_whole(runjobs: Runjobs) -> None:
    for args, message in [
        (("--queue", "a=2", "--queue", "b"), "give every queue its slots"),
        (("--queue", "a=2", "--queue", "b=1", "--concurrency", "2"), "add up to 3"),
        (("--queue", "a=0"), "slots of queue 'a'"),
        (("--queue", "a", "--queue", "a"), "a queue is named twice"),
    ]:
        result = runjobs(*args, "--burst")
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
    enqueue("test.noop", {}, queue="a")
    ok = runjobs("--queue", "a=2", "--queue", "b=1", "--burst")
    assert ok.returncode == 0, ok.stderr
    assert "concurrency=3" in ok.stderr
