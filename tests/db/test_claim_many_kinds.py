"""The claim of a worker of every queue that knows many kinds: it first walks the kinds that hold
ready jobs (a loose index scan), then scans its own among them (see MANY_KINDS). It must claim
exactly what the claim of a worker of few kinds claims, in the same order."""

from __future__ import annotations

import pytest
from django.db import connection

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job
from django_jobs.transitions import ClaimStatement, claim, pause_queue
from django_jobs.transitions.execution import MANY_KINDS
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

KNOWN = {"test.noop": 1, "test.record": 2, "test.keyed": 1}


def many_kinds(known: dict[str, int] = KNOWN) -> dict[str, int]:
    """``known`` and enough more types (with no job) to pass MANY_KINDS."""
    return {**known, **{f"other.t{i:03d}": 1 for i in range(MANY_KINDS)}}


def test_a_worker_of_many_kinds_claims_with_the_walk_of_live_kinds() -> None:
    assert "WITH RECURSIVE" in ClaimStatement("w", None, many_kinds()).sql
    assert "WITH RECURSIVE" not in ClaimStatement("w", None, KNOWN).sql
    # Named queues keep a scan per queue and kind.
    assert "WITH RECURSIVE" not in ClaimStatement("w", ["default"], many_kinds()).sql


def test_it_claims_what_a_worker_of_few_kinds_claims_in_the_same_order() -> None:
    def fill() -> None:
        Job.objects.all().delete()
        enqueue_many("test.noop", [{}] * 3, priority=-5)
        enqueue_many("test.record", [{}] * 2, priority=10)
        enqueue("test.keyed", {"key": "a"}, priority=0)
        JobFactory(type="test.record", version=3, ready=True, priority=50)  # newer than it reads
        JobFactory(type="test.unknown", ready=True, priority=90)  # a type it does not run
        enqueue("test.noop", {}, delay=3600, priority=100)  # not due

    orders = []
    for versions in (KNOWN, many_kinds()):
        fill()
        taken = claim(ClaimStatement("w", None, versions), 10)
        orders.append([(c.type, c.priority) for c in sorted(taken, key=lambda c: c.id)])
        assert [(c.type, c.priority) for c in taken] == sorted(
            ((c.type, c.priority) for c in taken), key=lambda row: -row[1]
        )
    assert orders[0] == orders[1]
    assert sorted(orders[1]) == sorted(
        [("test.noop", -5)] * 3 + [("test.record", 10)] * 2 + [("test.keyed", 0)]
    )


def test_it_takes_the_best_jobs_across_kinds_up_to_its_limit() -> None:
    low = enqueue_many("test.noop", [{}] * 5, priority=-1)
    high = enqueue_many("test.record", [{}] * 3, priority=5)
    statement = ClaimStatement("w", None, many_kinds())
    assert {c.id for c in claim(statement, 4)} == {j.id for j in high} | {low[0].id}


def test_kinds_of_other_workers_with_ready_jobs_cost_a_probe_each_not_a_dead_walk() -> None:
    # 300 kinds this worker does not run, each with ready jobs: the walk finds each once, and
    # the claim does not mistake them for dead entries stepped over (no vacuum is held back).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
            " attempts, max_attempts, on_lost)"
            " SELECT 'default', 'elsewhere.t' || (i % 300), 1, '{}', 'pending', 0, now(), 0, 5, 'retry'"
            " FROM generate_series(1, 3000) i"
        )
        # All visible: the walk reads each kind's first entry without its row, as a dead entry
        # is read, and the claim must not count those.
        cursor.execute("VACUUM ANALYZE django_jobs_job")
    job = enqueue("test.noop", {})
    statement = ClaimStatement("w", None, many_kinds())
    assert [c.id for c in claim(statement, 10)] == [job.id]
    assert statement.positions.walked == 0
    assert not statement.positions.remembering
    assert Job.objects.filter(type__startswith="elsewhere.", status="pending").count() == 3000


def test_a_paused_queue_is_stepped_over_by_the_claim_beside_paused_queues() -> None:
    enqueue_many("test.noop", [{}] * 3, queue="held")
    pause_queue("held", actor="test", reason="held")
    kept = enqueue("test.noop", {}, queue="default")
    statement = ClaimStatement("w", None, many_kinds())
    assert [c.id for c in claim(statement, 10)] == [kept.id]
    assert statement.queues_paused  # the next claims step over the paused backlog per queue
    assert "WITH RECURSIVE" in statement.sql and "l.q NOT IN" in statement.sql
