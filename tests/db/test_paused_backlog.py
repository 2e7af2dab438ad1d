"""A paused queue's backlog costs the other queues nothing: a worker of every queue claims
beside it as fast as without it, follows a pause and a resume from its next claim, and keeps
the claim's order and limits while it steps over the paused jobs."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_jobs import enqueue, pause_queue, resume_queue
from django_jobs.models import Job
from django_jobs.transitions import ClaimStatement, claim, outlook
from tests.db.test_scheduled_jobs import claim_pages

pytestmark = pytest.mark.usefixtures("vacuum_afterwards")

KINDS = {"test.noop": 1, "test.keyed": 1}

_FILL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
    " attempts, max_attempts, on_lost)"
    " SELECT %s, 'test.noop', 1, '{}', 'pending', 0, now() - make_interval(secs => %s), 0, 5, 'retry'"
    " FROM generate_series(1, %s)"
)


def fill(queue: str, n: int, age: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_FILL, [queue, age, n])
        cursor.execute("ANALYZE django_jobs_job")


@pytest.mark.django_db
def test_a_worker_of_every_queue_reads_no_more_beside_a_paused_backlog() -> None:
    statement = ClaimStatement("w", None, KINDS)
    fill("default", 50, age=60)
    alone = claim_pages(statement, 10)
    # 30,000 older jobs of the same kind, in a queue paused while they piled up: first in the
    # claim index's order, and none of them claimable.
    fill("reports", 30000, age=3600)
    pause_queue("reports", actor="ops", reason="the report service is down")
    first = claim(statement, 10)  # the usual statement: it learns of the pause
    assert {c.queue for c in first} == {"default"} and statement.queues_paused
    beside = claim_pages(statement, 10)
    # Reading the paused jobs' index entries alone would be over a hundred pages.
    assert beside <= alone + 60, json.dumps({"alone": alone, "beside": beside})


@pytest.mark.django_db(transaction=True)
def test_the_claim_follows_a_pause_and_a_resume_from_its_next_claim() -> None:
    statement = ClaimStatement("w", None, KINDS)
    report = enqueue("test.noop", {}, queue="reports", priority=100)
    first = enqueue("test.noop", {})
    pause_queue("reports", actor="ops", reason="maintenance")
    assert [c.id for c in claim(statement, 10)] == [first.id]
    assert statement.queues_paused
    second = enqueue("test.noop", {})
    assert [c.id for c in claim(statement, 10)] == [second.id]  # stepping over the paused queue
    resume_queue("reports", actor="ops", reason="done")
    # The statement that steps over paused queues reads which are paused when it runs: the
    # resumed queue's job is claimed at once, and the next claim is the usual one again.
    assert [c.id for c in claim(statement, 10)] == [report.id]
    assert not statement.queues_paused
    third = enqueue("test.noop", {})
    assert [c.id for c in claim(statement, 10)] == [third.id]


@pytest.mark.django_db(transaction=True)
def test_beside_a_paused_queue_the_claim_keeps_its_order_and_its_key_limits() -> None:
    statement = ClaimStatement("w", None, KINDS)
    enqueue("test.noop", {}, queue="paused", priority=100)
    pause_queue("paused", actor="ops", reason="incident")
    claim(statement, 1)  # nothing else is pending: this claim only learns of the pause
    assert statement.queues_paused
    old_low = enqueue("test.noop", {}, queue="a", priority=0)
    high = enqueue("test.noop", {}, queue="b", priority=5)
    keyed = [enqueue("test.keyed", {"key": "k"}, queue="c", priority=10) for _ in range(3)]
    newer_low = enqueue("test.noop", {}, queue="a", priority=0)
    taken = claim(statement, 10)
    # Best priority first across queues, then the longest due; test.keyed runs two of a key
    # at once, so the third keyed job waits, pending.
    assert [c.id for c in taken] == [keyed[0].id, keyed[1].id, high.id, old_low.id, newer_low.id]
    assert Job.objects.get(id=keyed[2].id).status == "pending"
    assert not Job.objects.filter(queue="paused", status="running").exists()


@pytest.mark.django_db(transaction=True)
def test_the_outlook_beside_a_paused_queue_reads_the_other_queues() -> None:
    statement = ClaimStatement("w", None, KINDS)
    enqueue("test.noop", {}, queue="reports")
    pause_queue("reports", actor="ops", reason="incident")
    assert outlook(statement).paused == {"reports"} and statement.queues_paused
    assert outlook(statement).due_in is None  # a paused job is not waited for
    enqueue("test.noop", {}, delay=120)
    due_in = outlook(statement).due_in
    assert due_in is not None and 100 < due_in <= 120
    enqueue("test.noop", {}, queue="mail")
    assert outlook(statement).due_in == 0.0
    resume_queue("reports", actor="ops", reason="back")
    assert outlook(statement).paused == frozenset() and not statement.queues_paused
