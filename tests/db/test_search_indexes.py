"""``manage.py jobsindexes``: the search indexes listed, built CONCURRENTLY (so on committed
rows, outside any transaction), rebuilt when a build was interrupted, dropped when no type
declares their field; and the system check that says one is missing."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction

from django_jobs import job
from django_jobs.checks import check_search_indexes
from django_jobs.maintenance import search_indexes
from django_jobs.models import Job
from django_jobs.reads.search import SearchRefused, search_condition
from django_jobs.reads.search_fields import IndexState, found_indexes, index_name
from django_jobs.reads.search_fields import search_indexes as declared_indexes
from django_jobs.registry import registry
from django_jobs.runtime.context import JobContext
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = "scratch.refund"
INDEX = index_name("order_id")


def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...


def execute(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.fixture
def refund_type() -> Iterator[None]:
    job(REFUND, search=("order_id", "customer"))(handler)
    yield
    registry.unregister(REFUND)
    # Outside any transaction, the indexes outlive the test: none may reach the next one.
    for name in found_indexes():
        execute(f'DROP INDEX IF EXISTS "{name}"')


def jobsindexes(*args: str) -> str:
    out = StringIO()
    call_command("jobsindexes", *args, stdout=out)
    return out.getvalue()


def warnings() -> list[str]:
    return [m.msg for m in check_search_indexes(databases=["default"]) if m.id == "django_jobs.W003"]


def leave_an_invalid_index() -> None:
    """What an interrupted ``CREATE INDEX CONCURRENTLY`` leaves: here, a unique build that meets
    a duplicate fails after the catalog knows the index, and PostgreSQL keeps it, invalid."""
    with pytest.raises(IntegrityError):
        execute(f"CREATE UNIQUE INDEX CONCURRENTLY \"{INDEX}\" ON django_jobs_job ((payload ->> 'order_id'))")
    assert found_indexes()[INDEX] is IndexState.INVALID


@pytest.mark.usefixtures("refund_type")
def test_the_command_builds_the_missing_indexes_and_the_search_then_runs() -> None:
    a = JobFactory(type=REFUND, payload={"order_id": "A-1", "customer": "c-9"})
    JobFactory(type=REFUND, payload={"order_id": "A-2"})
    assert jobsindexes().splitlines() == [
        f"customer\tmissing\t{index_name('customer')}\t{REFUND}\trun --create",
        f"order_id\tmissing\t{INDEX}\t{REFUND}\trun --create",
    ]
    assert len(warnings()) == 2 and "jobsindexes --create" in str(check_search_indexes(databases=["default"]))
    with pytest.raises(SearchRefused, match=r"is missing: run manage\.py jobsindexes --create"):
        search_condition("order_id=A-1")

    printed = jobsindexes("--create", "order_id")
    assert printed.startswith(f"{INDEX}: building") and f"{INDEX}: created in " in printed
    assert {i.field: i.state for i in declared_indexes()} == {
        "customer": IndexState.MISSING,
        "order_id": IndexState.VALID,
    }
    assert list(Job.objects.filter(search_condition("order_id=A-1")).values_list("id", flat=True)) == [a.id]

    jobsindexes("--create")
    assert warnings() == []
    assert jobsindexes("--create").splitlines() == [f"{index_name('customer')}: valid", f"{INDEX}: valid"]
    assert jobsindexes("--sql") == ""  # nothing left to run
    assert [line.split("\t")[1] for line in jobsindexes().splitlines()] == ["valid", "valid"]


@pytest.mark.usefixtures("refund_type")
def test_an_index_left_invalid_by_an_interrupted_build_is_refused_then_rebuilt() -> None:
    JobFactory(type=REFUND, payload={"order_id": "A-1"})
    b = JobFactory(type=REFUND, payload={"order_id": "A-1"})
    leave_an_invalid_index()
    with pytest.raises(SearchRefused, match="is invalid"):
        search_condition("order_id=A-1")
    assert f"order_id\tinvalid\t{INDEX}" in jobsindexes()
    assert any("is invalid" in message for message in warnings())
    assert jobsindexes("--sql", "order_id").splitlines() == [
        f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX}";',
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{INDEX}" ON django_jobs_job '
        "(left(payload ->> 'order_id', 300), id) WHERE (payload ->> 'order_id') IS NOT NULL;",
    ]

    assert f"{INDEX}: rebuilt in " in jobsindexes("--create", "order_id")
    assert found_indexes()[INDEX] is IndexState.VALID
    assert b.id in set(Job.objects.filter(search_condition("order_id=A-1")).values_list("id", flat=True))


@pytest.mark.usefixtures("refund_type")
def test_indexes_of_fields_no_type_declares_any_more_are_dropped_on_request() -> None:
    jobsindexes("--create")
    execute(f"CREATE INDEX \"{index_name('old_field')}\" ON django_jobs_job ((payload ->> 'old_field'))")
    assert f"-\tunused\t{index_name('old_field')}" in jobsindexes()
    assert jobsindexes("--drop-unused") == f"{index_name('old_field')}: dropped\n"
    assert sorted(found_indexes()) == [index_name("customer"), INDEX]
    assert jobsindexes("--drop-unused") == "no unused search index\n"


@pytest.mark.usefixtures("refund_type")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["order"], r"not a searchable field: order \(searchable: customer, order_id\)"),
        (["--drop-unused", "order_id"], "name no field"),
    ],
)
def test_the_command_refuses_what_it_cannot_do(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        jobsindexes(*args)


def test_the_command_says_when_no_type_declares_a_field() -> None:
    assert jobsindexes().startswith("no job type declares a searchable payload field")
    with pytest.raises(CommandError, match="no job type declares a searchable payload field"):
        jobsindexes("--create")
    with pytest.raises(CommandError, match=r"not a searchable field: order_id \(searchable: none\)"):
        jobsindexes("--sql", "order_id")
    assert check_search_indexes(databases=["default"]) == []


@pytest.mark.usefixtures("refund_type")
def test_a_build_inside_a_transaction_is_refused_before_postgresql_refuses_it() -> None:
    (index, *_) = declared_indexes()
    with transaction.atomic(), pytest.raises(search_indexes.BuildRefused, match="outside transaction"):
        search_indexes.build(index)
    assert index.name not in found_indexes()


@pytest.mark.usefixtures("refund_type")
def test_the_check_asks_the_database_only_when_django_runs_database_checks() -> None:
    assert check_search_indexes() == []  # manage.py check without --database, runserver
    assert check_search_indexes(databases=["other"]) == []
    assert len(warnings()) == 2
