"""The console's search box with ``field=value``: a page of the matching jobs once the field's
index is there, a clear 400 otherwise, never a 500 whatever is typed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from django_jobs import job
from django_jobs.reads.search_fields import create_sql
from django_jobs.registry import registry
from django_jobs.runtime.context import JobContext
from tests.admin.console import LIST
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

REFUND = "scratch.refund"


def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...


@pytest.fixture
def refund_type() -> Iterator[None]:
    job(REFUND, search=("order_id",))(handler)
    yield
    registry.unregister(REFUND)


@pytest.fixture
def order_id_index(refund_type: None) -> None:
    # As jobsindexes --create builds it, but in the test's transaction (rolled back with it).
    with connection.cursor() as cursor:
        cursor.execute(create_sql("order_id").replace(" CONCURRENTLY", ""))


@pytest.fixture
def console(login: Callable[[User | None], Client], superuser: User) -> Client:
    return login(superuser)


def listed(client: Client, term: str) -> list[int]:
    response = client.get(LIST, {"q": term})
    assert response.status_code == 200
    return [job.id for job in response.context["cl"].result_list]


@pytest.mark.usefixtures("order_id_index")
def test_the_list_shows_the_jobs_whose_field_is_the_value(console: Client) -> None:
    a = JobFactory(type=REFUND, payload={"order_id": "A-1"})
    JobFactory(type=REFUND, payload={"order_id": "A-2"})
    JobFactory(type="test.noop", payload={"order_id": "A-1"})  # its type does not declare the field
    assert listed(console, "order_id=A-1") == [a.id]
    assert listed(console, "order_id='; drop table django_jobs_job; --") == []
    assert "field=value" in console.get(LIST).content.decode()  # the box says what it takes


@pytest.mark.usefixtures("refund_type")
def test_a_field_without_its_index_is_a_400_not_a_whole_table_read(console: Client) -> None:
    assert console.get(LIST, {"q": "order_id=A-1"}).status_code == 400


@pytest.mark.usefixtures("order_id_index")
@pytest.mark.parametrize(
    "term",
    ["orderid=A-1", "order_id=", "order_id=" + "x" * 10_000, "card=4111"],
)
def test_what_no_index_can_serve_is_a_400(term: str, console: Client) -> None:
    assert console.get(LIST, {"q": term}).status_code == 400


@pytest.mark.usefixtures("order_id_index")
def test_a_nul_in_the_value_is_refused_by_the_form_and_searches_nothing(console: Client) -> None:
    # Django's search form refuses it with a message and lists the jobs unsearched: a page.
    response = console.get(LIST, {"q": "order_id=A\x001"})
    assert response.status_code == 200
    assert "Null characters are not allowed" in response.content.decode()
