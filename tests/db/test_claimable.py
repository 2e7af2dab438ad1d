"""``Job.objects.claimable()`` reads the claim's own rule: on a mixed table it finds what the
worker's claim statement takes, in the order the claim takes it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_jobs import pause_queue
from django_jobs.models import Job
from django_jobs.registry import registry
from django_jobs.runtime.worker import Worker
from django_jobs.transitions import claim
from django_jobs.transitions.claimable import claim_filter, claim_inputs, positional, row_conditions
from django_jobs.transitions.execution import _NOT_PAUSED, _PAUSED_QUEUES, _RATE_KIND_ROOM, _RATE_ROOM_FILTER
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


@pytest.fixture
def mixed_table() -> dict[str, Job]:
    """Rows a worker must take, in a known order, among rows it must leave."""
    rows = {
        # Claimable: best priority first, then the longest due, then the id.
        "urgent": JobFactory(priority=50, available_at=ago(1)),
        "old": JobFactory(available_at=ago(300)),
        "a_minute_first_id": JobFactory(available_at=ago(60)),
        "a_minute_second_id": JobFactory(available_at=ago(60)),
        "low_priority": JobFactory(priority=-10, available_at=ago(3600)),
        "other_queue": JobFactory(queue="emails", available_at=ago(30)),
        "upcast": JobFactory(type="test.versioned", version=1, available_at=ago(10)),
        # Not claimable.
        "future": JobFactory(available_at=timezone.now() + dt.timedelta(hours=1)),
        "foreign_type": JobFactory(type="billing.unknown_here", available_at=ago(500)),
        "unknown_version": JobFactory(type="test.versioned", version=4, available_at=ago(500)),
        "paused_queue": JobFactory(queue="reports", available_at=ago(500)),
        "running": JobFactory(running=True),
        "failed": JobFactory(failed=True),
        "key_at_its_limit": JobFactory(
            type="test.keyed", concurrency_key="k", concurrency_limit=1, available_at=ago(500)
        ),
    }
    JobFactory(running=True, type="test.keyed", concurrency_key="k", concurrency_limit=1)
    pause_queue("reports", actor="ops", reason="maintenance")
    return rows


def names(rows: dict[str, Job], ids: list[int]) -> list[str]:
    by_id = {job.id: name for name, job in rows.items()}
    return [by_id.get(i, f"#{i}") for i in ids]


def test_claimable_lists_what_the_claim_takes_in_its_order(mixed_table: dict[str, Job]) -> None:
    # Priority first: "low_priority" waited longest but comes after every job of priority 0.
    expected = ["urgent", "old", "a_minute_first_id", "a_minute_second_id", "other_queue", "upcast"]
    expected.append("low_priority")
    listed = list(Job.objects.claimable().values_list("id", flat=True))
    assert names(mixed_table, listed) == expected

    statement = Worker(burst=True)._producer.statement  # the statement runjobs claims with
    claimed = claim(statement, limit=100)
    assert [c.id for c in claimed] == listed


def test_claimable_of_named_queues_is_what_a_worker_of_those_queues_takes(
    mixed_table: dict[str, Job],
) -> None:
    listed = list(Job.objects.claimable(queues=["emails", "reports"]).values_list("id", flat=True))
    assert names(mixed_table, listed) == ["other_queue"]  # reports is paused
    claimed = claim(Worker(burst=True, queues=["emails", "reports"])._producer.statement, limit=100)
    assert [c.id for c in claimed] == listed


def test_claimable_of_some_types_leaves_the_others(mixed_table: dict[str, Job]) -> None:
    listed = Job.objects.claimable(types=["test.versioned", "billing.unknown_here"])
    # A type this process has no handler for is never claimable, even when asked for.
    assert names(mixed_table, list(listed.values_list("id", flat=True))) == ["upcast"]
    assert not Job.objects.claimable(types=["billing.unknown_here"]).exists()


def test_claimable_is_a_queryset_that_composes(mixed_table: dict[str, Job]) -> None:
    assert Job.objects.claimable().filter(priority__gt=0).get() == mixed_table["urgent"]
    assert Job.objects.filter(queue="emails").claimable().count() == 1


def test_claimable_filters_with_the_claim_statements_own_text() -> None:
    # The conditions on a waiting job are the claim's, word for word: the claim checks them
    # when it scans a row, claimable() ends with them.
    for queues in (None, ["emails"]):
        worker = Worker(burst=True, queues=queues)
        inputs = claim_inputs(registry.all())
        sql, _ = claim_filter(inputs)
        conditions = row_conditions(inputs)
        assert sql.endswith(conditions)
        statement = worker._producer.statement.sql
        if queues:
            # A worker of named queues leaves a paused queue out before its scans, and tests the
            # rest of the conditions on each row.
            assert statement.count(f"q.name NOT IN ({_PAUSED_QUEUES})") == 1
            conditions = conditions.replace(_NOT_PAUSED, "")
        # A full rate window is tested once per kind, not per row: it leaves the kind no room.
        assert _RATE_ROOM_FILTER in conditions and _RATE_KIND_ROOM.split("{room}")[1] in statement
        assert statement.count(conditions.replace(_RATE_ROOM_FILTER, "")) == 1
    raw, params = positional(*claim_filter(claim_inputs(registry.all())))
    assert "%(" not in raw and raw.count("%s") == len(params)
