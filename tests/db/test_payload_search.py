"""A search by a payload field a job type declares searchable: served by the field's index, on
a table of any size, and refused while that index is not there to serve it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet

from django_jobs import enqueue, job
from django_jobs.console.job_filter import InvalidFilter, JobFilter
from django_jobs.models import Job
from django_jobs.reads.search import SearchRefused, search_condition
from django_jobs.reads.search_fields import create_sql, index_name
from django_jobs.registry import registry
from django_jobs.runtime.context import JobContext
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

#: Declares order_id searchable; OTHER carries order_id in its payloads too, without declaring it.
REFUND = "scratch.refund"
OTHER = "scratch.other"
INDEX = index_name("order_id")


def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...


@pytest.fixture
def refund_type() -> Iterator[None]:
    job(REFUND, search=("order_id",))(handler)
    job(OTHER)(handler)
    yield
    registry.unregister(REFUND)
    registry.unregister(OTHER)


@pytest.fixture
def order_id_index(refund_type: None) -> None:
    """The field's index, as ``jobsindexes --create`` builds it but inside the test's transaction
    (without CONCURRENTLY): rolled back with it (test_search_indexes.py builds it for real)."""
    with connection.cursor() as cursor:
        cursor.execute(create_sql("order_id").replace(" CONCURRENTLY", ""))


def found(term: str) -> set[int]:
    return set(Job.objects.filter(search_condition(term)).values_list("id", flat=True))


@pytest.mark.usefixtures("order_id_index")
def test_a_field_search_finds_the_jobs_of_the_declaring_types_whose_field_is_the_value() -> None:
    a = JobFactory(type=REFUND, payload={"order_id": "A-1", "total": 5})
    b = JobFactory(type=REFUND, payload={"order_id": "A-1"}, failed=True)
    JobFactory(type=REFUND, payload={"order_id": "A-10"})
    JobFactory(type=REFUND, payload={"order_id": "a-1"})  # exact, case included
    JobFactory(type=REFUND, payload={"order": {"order_id": "A-1"}})  # top-level keys only
    JobFactory(type=REFUND, payload={"order_id": None})
    JobFactory(type=OTHER, payload={"order_id": "A-1"})  # same key, a type that does not declare it
    JobFactory(type=REFUND, unique_key="order_id=A-1")
    number = JobFactory(type=REFUND, payload={"order_id": 1234})

    assert found("order_id=A-1") == {a.id, b.id}
    assert found("  order_id = A-1 ") == {a.id, b.id}
    assert found("order_id=1234") == {number.id}  # compared as the JSON value's text
    assert found("order_id=A-2") == set()
    # The same search through the filter of bulk operations and manage.py jobs.
    failed = JobFilter(status="failed", search="order_id=A-1")
    assert set(Job.objects.filter(failed.condition()).values_list("id", flat=True)) == {b.id}


@pytest.mark.usefixtures("refund_type")
def test_without_its_index_a_field_search_is_refused_naming_the_command() -> None:
    with pytest.raises(SearchRefused, match=rf"\({INDEX}\) is missing: run manage.py jobsindexes --create"):
        search_condition("order_id=A-1")
    with pytest.raises(InvalidFilter, match="jobsindexes --create"):
        JobFilter(search="order_id=A-1")


@pytest.mark.usefixtures("refund_type")
def test_a_field_whose_type_masks_it_since_is_refused() -> None:
    # Declared before the project's patterns grew to cover it: the search still may not probe it.
    from django.test import override_settings

    with (
        override_settings(DJANGO_JOBS={"SENSITIVE_PAYLOAD_KEYS": ["order"]}),
        pytest.raises(SearchRefused, match="sensitive"),
    ):
        search_condition("order_id=A-1")


@pytest.mark.usefixtures("order_id_index")
@pytest.mark.parametrize(
    "value",
    ["'; DROP TABLE django_jobs_job; --", "A-1' OR '1'='1", "%", "_", "\\", "A-1%", "$1", "' || '", "\u202e"],
)
def test_a_hostile_value_matches_nothing_and_changes_nothing(value: str) -> None:
    JobFactory(type=REFUND, payload={"order_id": "A-1"})
    assert found(f"order_id={value}") == set()
    assert Job.objects.count() == 1


@pytest.mark.usefixtures("order_id_index")
def test_any_unicode_value_is_found_as_it_is() -> None:
    ids = {
        value: JobFactory(type=REFUND, payload={"order_id": value}).id for value in ("Ü-𝟘-١", "заказ 7", "☃")
    }
    for value, job_id in ids.items():
        assert found(f"order_id={value}") == {job_id}


@pytest.mark.usefixtures("order_id_index")
@pytest.mark.parametrize(
    ("term", "message"),
    [("order_id=A\x001", "NUL"), ("order_id=" + "x" * 10_000, "at most 300 characters")],
)
def test_a_value_postgresql_cannot_compare_or_no_index_holds_is_refused(term: str, message: str) -> None:
    with pytest.raises(SearchRefused, match=message):
        search_condition(term)


@pytest.mark.usefixtures("order_id_index")
def test_a_job_whose_field_is_longer_than_an_index_entry_is_still_enqueued() -> None:
    # A B-tree entry holds about 2.7 kB: an index on the whole value would refuse this job.
    long = secrets.token_urlsafe(8_000)  # PostgreSQL compresses an entry; this does not shrink
    created = enqueue(REFUND, {"order_id": long})
    assert found("order_id=" + long[:290]) == set()  # a prefix is not the value
    short = enqueue(REFUND, {"order_id": "x" * 290})
    assert found("order_id=" + "x" * 290) == {short.id} and created.id != short.id


# ---- the plans, on a table of many jobs ----------------------------------------------------

ROWS = 100_000
#: Every 10th job a refund (one order of every 20 shares its id with 200 others: a common value),
#: every 50th an OTHER job with an order_id of its own, the rest without the field.
FILL = f"""
INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at, attempts,
                             max_attempts)
SELECT 'default',
       CASE WHEN i % 10 = 0 THEN '{REFUND}' WHEN i % 50 = 1 THEN '{OTHER}' ELSE 'test.noop' END,
       1,
       CASE WHEN i % 10 = 0 AND i % 200 = 0 THEN jsonb_build_object('order_id', 'COMMON')
            WHEN i % 10 = 0 OR i % 50 = 1 THEN jsonb_build_object('order_id', 'A-' || i)
            ELSE jsonb_build_object('n', i) END,
       CASE WHEN i % 7 = 0 THEN 'failed' ELSE 'completed' END,
       0, now(), 1, 5
FROM generate_series(1, {ROWS}) AS i
"""


@pytest.fixture
def many_jobs(order_id_index: None, vacuum_afterwards: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(FILL)
        cursor.execute("ANALYZE django_jobs_job")


def plan_of(queryset: QuerySet[Job]) -> dict[str, Any]:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan: dict[str, Any] = cursor.fetchone()[0][0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def reads_of_the_job_table(plan: dict[str, Any]) -> list[str]:
    """How the plan reads the job table: each scan's type and index (a bitmap scan's index is
    on the node below its heap scan)."""
    return [
        f"{node['Node Type']} {node.get('Index Name', '')}".strip()
        for node in nodes(plan)
        if node.get("Relation Name") == "django_jobs_job" or node["Node Type"] == "Bitmap Index Scan"
    ]


@pytest.mark.usefixtures("many_jobs")
@pytest.mark.parametrize("value", ["A-500", "COMMON", "A-501", "nobody"])
def test_the_console_reads_the_matches_through_the_fields_index(value: str) -> None:
    condition = search_condition(f"order_id={value}")
    failed = JobFilter(status="failed", search=f"order_id={value}").condition()
    for queryset in (
        Job.objects.filter(condition).order_by("-id")[:51],  # the list's first page
        Job.objects.filter(condition).values("id"),  # its exact count, for a small result
        Job.objects.filter(failed),  # a bulk operation's filter
    ):
        reads = reads_of_the_job_table(plan_of(queryset))
        # The field's index (an ordered scan, or a bitmap of the matches), perhaps with another
        # that narrows it further (failed jobs: django_jobs_problems); never the whole table.
        assert any(INDEX in read for read in reads) and "Seq Scan" not in reads, reads
    assert (
        Job.objects.filter(condition).count() == {"A-500": 1, "COMMON": 500, "A-501": 0, "nobody": 0}[value]
    )


@pytest.mark.usefixtures("many_jobs")
def test_a_prepared_statements_generic_plan_still_uses_the_index() -> None:
    # The key is a literal, not a parameter: payload ->> $1 would not be the index's expression.
    page = Job.objects.filter(search_condition("order_id=A-500")).order_by("-id")[:51]
    sql, params = page.query.sql_with_params()
    numbered = sql
    for n in range(1, len(params) + 1):
        numbered = numbered.replace("%s", f"${n}", 1)
    with connection.cursor() as cursor:
        cursor.execute("PREPARE payload_search AS " + numbered)
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        arguments = ", ".join("%s" for _ in params)
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE payload_search({arguments})", params)
        plan = cursor.fetchone()[0][0]["Plan"]
        cursor.execute("DEALLOCATE payload_search")
    assert reads_of_the_job_table(plan) == [f"Index Scan {INDEX}"], json.dumps(plan)
