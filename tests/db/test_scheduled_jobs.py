"""Jobs scheduled for later wait apart from the claim indexes: written not ready (by a trigger,
whoever writes them), promoted by the claims of their kind once due, and taken by the claim that
promoted them; and the claim's reads do not grow with rows it cannot take."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.db import connection, transaction

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.transitions import ClaimStatement, Outcome, claim, execution, manual_retry, write_outcomes

pytestmark = pytest.mark.usefixtures("vacuum_afterwards")

NOOP = ClaimStatement("w", None, {"test.noop": 1})


def ready(job_id: int) -> bool:
    return Job.objects.values_list("ready", flat=True).get(id=job_id)


def sql(statement: str, params: object = ()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.mark.django_db
def test_a_job_due_at_its_write_is_ready_and_one_scheduled_for_later_is_not() -> None:
    assert ready(enqueue("test.noop", {}).id)
    assert not ready(enqueue("test.noop", {}, delay=30).id)
    # Raw SQL too: the trigger keeps the column, not the code paths that write jobs.
    sql(
        "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
        " max_attempts, available_at, on_lost) VALUES ('default', 'test.noop', 1, '{}', 'pending',"
        " 0, 0, 5, now() + interval '1 hour', 'retry')"
    )
    assert not Job.objects.latest("id").ready


@pytest.mark.django_db(transaction=True)
def test_a_job_written_with_the_columns_default_due_time_is_ready() -> None:
    """``available_at`` defaults to the statement's start, which is later than ``now()`` (the
    transaction's start) for any statement but the first of a transaction, and for a first one
    sent with parameters (psycopg's extended protocol starts the statement after the
    transaction): such a job is due at its write and must not wait for a claim to promote it."""
    columns = "(queue, type, version, payload, status, priority, attempts, max_attempts, on_lost)"
    row = "('default', 'test.noop', 1, '{}', 'pending', 0, 0, 5, 'retry')"
    sql(f"INSERT INTO django_jobs_job {columns} VALUES {row}")  # autocommit, no parameters
    sql(f"INSERT INTO django_jobs_job {columns} SELECT {row[1:-1]} FROM generate_series(1, %s)", [3])
    with transaction.atomic():
        sql("SELECT pg_sleep(0.01)")
        sql(f"INSERT INTO django_jobs_job {columns} VALUES {row}")  # later in its transaction
        Job.objects.create(type="test.noop", payload={})  # the ORM, with the model's defaults
    jobs = Job.objects.order_by("id")
    assert [job.ready for job in jobs] == [True] * 6
    assert all(job.available_at <= job.created_at for job in jobs)
    assert len(claim(NOOP, 10)) == 6


@pytest.mark.django_db
def test_a_retry_for_later_is_not_ready_and_one_due_now_or_an_operators_retry_is() -> None:
    backoff, at_once = enqueue("test.noop", {}), enqueue("test.noop", {})
    claimed = {c.id: c for c in claim(NOOP, 10)}
    write_outcomes([
        Outcome(backoff.id, claimed[backoff.id].execution_id, JobStatus.PENDING, delay=30.0, error_code="X"),
        Outcome(at_once.id, claimed[at_once.id].execution_id, JobStatus.PENDING, delay=0.0),
    ])  # fmt: skip
    assert not ready(backoff.id) and ready(at_once.id)
    failed = enqueue("test.noop", {}, delay=3600)
    sql("UPDATE django_jobs_job SET status = 'failed', finished_at = now() WHERE id = %s", [failed.id])
    manual_retry(failed.id, actor="ops", reason="fixed")
    assert ready(failed.id)


@pytest.mark.django_db(transaction=True)
def test_the_claim_that_promotes_a_due_job_takes_it() -> None:
    job = enqueue("test.noop", {}, delay=0.3)
    assert claim(NOOP, 10) == [] and not ready(job.id)
    time.sleep(0.5)
    # One call: the first statement promotes it (its own snapshot cannot see it ready), the
    # second takes it.
    assert [c.id for c in claim(NOOP, 10)] == [job.id]
    assert Job.objects.get(id=job.id).status == "running"


@pytest.mark.django_db(transaction=True)
def test_a_claim_promotes_only_its_own_kinds() -> None:
    other = enqueue("test.record", {}, delay=0.2)
    newer = Job.objects.get(id=enqueue("test.noop", {}, delay=0.2).id)
    Job.objects.filter(id=newer.id).update(version=2)  # a payload version NOOP cannot read
    time.sleep(0.4)
    assert claim(NOOP, 10) == []
    assert not ready(other.id) and not ready(newer.id)
    assert [c.id for c in claim(ClaimStatement("w", None, {"test.record": 1}), 10)] == [other.id]


@pytest.mark.django_db(transaction=True)
def test_the_second_claim_keeps_the_limit_and_the_queues_rooms() -> None:
    first = enqueue("test.noop", {}, queue="a")
    for _ in range(3):
        enqueue("test.noop", {}, queue="a", delay=0.2)
    enqueue("test.noop", {}, queue="b", delay=0.2)
    time.sleep(0.4)
    named = ClaimStatement("w", ["a", "b"], {"test.noop": 1})
    taken = claim(named, 3, start_now=1, rooms=[2, 1])
    # The first statement took the ready job of "a" and promoted the rest; the second one had
    # room for one more of "a" and one of "b", and one start left: the first claim used it.
    assert sorted(c.queue for c in taken) == ["a", "a", "b"]
    assert first.id in {c.id for c in taken}
    assert sum(c.counted for c in taken) == 1


def made_due(job_id: int) -> None:
    """A job scheduled for later whose due time has come (it is still not ready)."""
    sql("UPDATE django_jobs_job SET available_at = now() - interval '1 second' WHERE id = %s", [job_id])
    assert not ready(job_id)


@pytest.mark.django_db(transaction=True)
def test_claims_that_fill_their_batch_promote_at_most_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 3600.0)
    enqueue_many("test.noop", [{}] * 30)
    scheduled = enqueue("test.noop", {}, delay=3600, priority=100)
    statement = ClaimStatement("w", None, {"test.noop": 1})
    assert len(claim(statement, 10)) == 10  # the first claim promotes (nothing is due)
    made_due(scheduled.id)
    # The next full claims skip the promotion: the due job waits, the backlog drains.
    assert len(claim(statement, 10)) == 10 and not ready(scheduled.id)
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 0.0)
    # Its interval passed: this claim promotes it, and the next claim takes it first.
    assert len(claim(statement, 5)) == 5 and ready(scheduled.id)
    assert claim(statement, 1)[0].id == scheduled.id


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_skipped_the_promotion_and_came_back_short_promotes_and_claims_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 3600.0)
    backlog = enqueue_many("test.noop", [{}] * 13)
    scheduled = enqueue("test.noop", {}, delay=3600)
    statement = ClaimStatement("w", None, {"test.noop": 1})
    assert len(claim(statement, 10)) == 10
    made_due(scheduled.id)
    # Three statements in one call: the 3 ready jobs without promoting (short), then the
    # promotion, then the promoted job: a burst worker that sees a short claim has nothing left.
    taken = claim(statement, 10)
    assert sorted(c.id for c in taken) == sorted([j.id for j in backlog[10:]] + [scheduled.id])
    # A claim that came back with room promotes at the next claim, whatever the interval.
    assert statement.promotion_due()


@pytest.mark.django_db(transaction=True)
def test_a_claim_promotes_again_while_its_promotions_find_due_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 3600.0)
    enqueue_many("test.noop", [{}] * 40)
    scheduled = enqueue_many("test.noop", [{}] * 3, delay=3600, priority=-10)
    statement = ClaimStatement("w", None, {"test.noop": 1})
    assert len(claim(statement, 10)) == 10
    assert not statement.promotion_due()  # a full claim whose promotion found nothing
    for job in scheduled:
        made_due(job.id)
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 0.0)
    assert len(claim(statement, 10)) == 10 and all(ready(j.id) for j in scheduled)
    monkeypatch.setattr(execution, "PROMOTE_EVERY", 3600.0)
    assert statement.promotion_due()  # that one promoted jobs: more may be due
    assert len(claim(statement, 10)) == 10
    assert not statement.promotion_due()  # this one found none: the interval holds again


def claim_pages(statement: ClaimStatement, limit: int) -> int:
    """The pages the claim reads to find and lock its jobs (its promotion and candidates; the
    update that follows writes index entries whose cost grows with the log of the table)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement.sql, statement.params(limit))
        root = cursor.fetchone()[0][0]["Plan"]
    found: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        if node.get("Subplan Name") in ("CTE promoted", "CTE candidates"):
            found[node["Subplan Name"]] = node["Shared Hit Blocks"] + node["Shared Read Blocks"]
        for child in node.get("Plans", []):
            walk(child)

    walk(root)
    assert set(found) == {"CTE promoted", "CTE candidates"}, found
    return sum(found.values())


_FILL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
    " attempts, max_attempts, on_lost)"
    " SELECT 'default', %s, %s, '{}', 'pending', %s, now() + make_interval(secs => %s), 0, 5, 'retry'"
    " FROM generate_series(1, %s)"
)


@pytest.mark.django_db
def test_the_claim_reads_no_more_beside_rows_it_cannot_take() -> None:
    # The claim's pages with 50 due jobs alone, then beside 30,000 jobs of each kind of row it
    # cannot take, all of them ahead of the due jobs in priority or age.
    sql(_FILL, ["test.noop", 1, 0, -60, 50])
    sql("ANALYZE django_jobs_job")
    alone = claim_pages(NOOP, 10)
    sql(_FILL, ["test.noop", 1, 10, 3600, 30000])  # scheduled for later, at a higher priority
    sql(_FILL, ["other.service", 1, 0, -3600, 30000])  # due, of a type this worker does not run
    sql(_FILL, ["test.noop", 2, 0, -3600, 30000])  # due, of a version it cannot read
    sql("ANALYZE django_jobs_job")
    beside = claim_pages(NOOP, 10)
    # Walking the 90,000 rows (or only their index entries) would read over a thousand pages;
    # what grows is the depth of the indexes the claim descends, a page or two per descent.
    assert beside <= alone + 60, json.dumps({"alone": alone, "beside": beside})
