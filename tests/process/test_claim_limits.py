"""Concurrency keys and rate limits hold across real `runjobs` processes."""

from __future__ import annotations

from collections import defaultdict

import pytest

from django_jobs import enqueue_many
from django_jobs.models import Job
from testproject.testjobs.models import KeyedRun
from tests.process.workers import StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that overlap at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    at_once = most = 0
    for _, change in events:  # at equal times an end (-1) sorts before a start (+1)
        at_once += change
        most = max(most, at_once)
    return most


def completed(type_name: str) -> int:
    return Job.objects.filter(type=type_name, status="completed").count()


def test_no_key_ever_runs_more_jobs_at_once_than_its_limit(start_worker: StartWorker) -> None:
    keys = [f"customer:{i}" for i in range(10)]
    enqueue_many("test.keyed", [{"key": keys[i % 10], "seconds": 0.02} for i in range(400)])  # limit 2
    for _ in range(2):
        start_worker("--concurrency", "4")
    wait_for(lambda: completed("test.keyed") == 400, timeout=120, what="all 400 jobs to complete")

    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in KeyedRun.objects.all():
        runs[run.key].append((run.started, run.finished))
    assert sorted(runs) == keys and sum(len(r) for r in runs.values()) == 400
    overlaps = {key: most_at_once(intervals) for key, intervals in runs.items()}
    assert max(overlaps.values()) == 2, overlaps  # the limit is reached, never passed
    # Waiting for a key used no attempt: every job ran once.
    assert set(Job.objects.filter(type="test.keyed").values_list("attempts", flat=True)) == {1}


def test_no_second_has_more_starts_than_the_rate_limit(start_worker: StartWorker) -> None:
    enqueue_many("test.rated", [{}] * 200)  # rate_limit="20/s"
    # A long poll interval: what wakes the workers when the window opens is the claim's
    # notification, not polling.
    slow_poll = {"DJANGO_JOBS_POLL_INTERVAL": "5"}
    for _ in range(3):
        start_worker("--concurrency", "4", env=slow_poll)
    wait_for(lambda: completed("test.rated") == 200, timeout=60, what="all 200 jobs to complete")

    rated = Job.objects.filter(type="test.rated")
    starts = sorted(s.timestamp() for s in rated.values_list("started_at", flat=True))
    assert len(starts) == 200
    busiest = max(sum(1 for s in starts if first <= s < first + 1.0) for first in starts)
    assert busiest <= 20, f"{busiest} starts within one second"
    # As soon as the window allows: 200 starts at 20 per second take about 9 seconds.
    assert starts[-1] - starts[0] < 11.5
    assert set(rated.values_list("attempts", flat=True)) == {1}
    assert len({w for w in rated.values_list("worker_id", flat=True)}) > 1  # shared by the workers
