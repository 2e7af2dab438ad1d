"""Article test 11: workers race for the same jobs on real, concurrent connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from django_jobs.models import Job
from django_jobs.transitions import Claim, ClaimStatement, claim
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def race(contenders: int, attempt: Callable[[int], Any]) -> list[Any]:
    """Run ``attempt(i)`` on ``contenders`` threads released at the same instant."""
    barrier = threading.Barrier(contenders)
    results: list[Any] = [None] * contenders
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier: race the claim, not the login
            barrier.wait(timeout=10)
            results[i] = attempt(i)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return results


def test_11_two_workers_racing_for_one_job_never_both_win() -> None:
    statements = [ClaimStatement(f"worker-{i}", None, {"test.noop": 1}) for i in range(2)]
    for _ in range(200):
        job = JobFactory()
        results: list[list[Claim]] = race(2, lambda i: claim(statements[i], 1))
        winners = [i for i, claims in enumerate(results) if claims]
        assert len(winners) == 1, f"job {job.id}: winners {winners}"
        job.refresh_from_db()
        won = results[winners[0]][0]
        assert (job.status, job.attempts) == ("running", 1)
        assert job.worker_id == f"worker-{winners[0]}" and job.execution_id == won.execution_id
        Job.objects.filter(id=job.id).delete()


def test_batch_claims_from_concurrent_workers_never_overlap() -> None:
    JobFactory.create_batch(600)
    statements = [ClaimStatement(f"worker-{i}", None, {"test.noop": 1}) for i in range(4)]

    def drain(i: int) -> list[int]:
        taken: list[int] = []
        while batch := claim(statements[i], 25):
            taken += [c.id for c in batch]
        return taken

    results = race(4, drain)
    all_ids = [job_id for taken in results for job_id in taken]
    assert len(all_ids) == len(set(all_ids)) == 600
    assert all(results), "every worker should have won some jobs"
    assert Job.objects.filter(status="running").count() == 600


def test_named_queue_claims_never_overlap() -> None:
    for queue in ("a", "b", "c"):
        JobFactory.create_batch(100, queue=queue)
    statements = [ClaimStatement(f"worker-{i}", ["a", "b", "c"], {"test.noop": 1}) for i in range(3)]

    def drain(i: int) -> list[int]:
        taken: list[int] = []
        while batch := claim(statements[i], 10):
            taken += [c.id for c in batch]
        return taken

    all_ids = [job_id for taken in race(3, drain) for job_id in taken]
    assert len(all_ids) == len(set(all_ids)) == 300
