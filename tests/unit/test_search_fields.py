"""``@job(search=...)``: what a job type may declare searchable, refused at import time otherwise,
and the statements and terms built from it (no database: tests/db/test_payload_search.py has
the index, the plans and the command)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from django_jobs import job
from django_jobs.reads import search_fields
from django_jobs.reads.search import MAX_TERM_CHARS, SearchRefused, search_condition
from django_jobs.registry import registry
from django_jobs.runtime.context import JobContext

TYPE = "scratch.searchable"


def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...


@pytest.fixture
def scratch() -> Iterator[None]:
    yield
    for name in (TYPE, "scratch.also_searchable"):
        registry.unregister(name)


def test_a_type_declares_its_searchable_fields(scratch: None) -> None:
    job(TYPE, search=["order_id", "customerId"])(handler)
    job("scratch.also_searchable", search=("order_id",))(handler)
    job_type = registry.get(TYPE)
    assert job_type is not None and job_type.search == ("order_id", "customerId")
    declared = search_fields.declared()
    assert declared["order_id"] == ("scratch.also_searchable", TYPE)
    assert declared["customerId"] == (TYPE,)


@pytest.mark.parametrize(
    "search",
    [
        "order_id",  # a bare string, which would be read letter by letter
        b"order_id",
        {"order_id": 1},
        {"order_id"},
        42,
        None,
        (42,),
        (None,),
        ("",),
        (" order_id",),
        ("order_id ",),
        ("order_id\n",),  # "$" would let a trailing newline through
        ("order-id",),
        ("order.id",),
        ("1st",),
        ("x" * 41,),  # its index's name would pass PostgreSQL's 63 characters
        ("x" * 64,),
        ("ordér",),
        ("order_id'",),
        ("a'); DROP TABLE django_jobs_job; --",),
        ('a"b',),
        ("a%sb",),
        ("a\x00b",),
        ("order_id", "order_id"),
        ["order_id", "total", "order_id"],
    ],
    ids=repr,
)
def test_what_cannot_be_an_index_or_a_search_field_is_refused_at_import_time(search: Any) -> None:
    with pytest.raises(ValueError, match="search"):
        job(TYPE, search=search)
    assert TYPE not in registry


@pytest.mark.parametrize("sensitive", [("card",), ("CARD",), ["other", "card"]])
def test_a_sensitive_field_is_not_searchable(sensitive: Any) -> None:
    with pytest.raises(ValueError, match="'card' is sensitive"):
        job(TYPE, sensitive=sensitive, search=("card",))


@pytest.mark.parametrize("field", ["api_key", "reset_token", "Password_hint", "my_secret"])
def test_a_field_the_projects_patterns_mask_is_not_searchable(field: str) -> None:
    with pytest.raises(ValueError, match="is sensitive"):
        job(TYPE, search=(field,))


@override_settings(DJANGO_JOBS={"SENSITIVE_PAYLOAD_KEYS": [r"^iban$"]})
def test_the_projects_own_patterns_decide_what_is_sensitive(scratch: None) -> None:
    with pytest.raises(ValueError, match="is sensitive"):
        job(TYPE, search=("IBAN",))
    job(TYPE, search=("token",))(handler)  # no longer one of the patterns
    assert "token" in search_fields.declared()


def test_no_field_is_the_default_and_an_empty_one_is_fine(scratch: None) -> None:
    job(TYPE, search=[])(handler)
    job_type = registry.get(TYPE)
    assert job_type is not None and job_type.search == ()


def test_the_longest_field_names_an_index_within_postgresqls_limit() -> None:
    longest = "x" * 40
    assert len(search_fields.index_name(longest)) == 63
    assert search_fields.create_sql(longest).count(f"'{longest}'") == 2


def test_the_index_holds_every_character_a_term_may_have() -> None:
    # A value shorter than the index's prefix is found exactly by it (see field_equals).
    longest_value = MAX_TERM_CHARS - len("a=")
    assert longest_value < search_fields.INDEXED_CHARS


def test_statements_refuse_a_field_that_did_not_come_through_job() -> None:
    for bad in ("a'b", "x" * 41, "a b", ""):
        with pytest.raises(ValueError, match="is not a searchable payload key"):
            search_fields.create_sql(bad)
        with pytest.raises(ValueError, match="is not a searchable payload key"):
            search_fields.PayloadText(bad)
    with pytest.raises(ValueError, match="is not a search index"):
        search_fields.drop_sql("django_jobs_status")


def test_a_hand_made_index_name_is_quoted_when_dropped() -> None:
    assert search_fields.drop_sql('django_jobs_job_search_a"b') == (
        'DROP INDEX CONCURRENTLY IF EXISTS "django_jobs_job_search_a""b"'
    )


def test_a_field_no_type_declares_is_refused_naming_those_that_are(scratch: None) -> None:
    job(TYPE, search=("order_id",))(handler)
    with pytest.raises(SearchRefused, match=r"'orderid' is not a searchable payload field.*order_id"):
        search_condition("orderid=A-1")


def test_a_unique_key_holding_an_equals_sign_is_found_in_double_quotes() -> None:
    condition = str(search_condition('"sync=42"'))
    assert "('unique_key', 'sync=42')" in condition and "payload" not in condition


@pytest.mark.parametrize("term", ["order:7", "sync.account=42", "=42", "a b=c", "42"])
def test_terms_not_shaped_field_equals_value_stay_plain(term: str) -> None:
    assert "('unique_key', " in str(search_condition(term))


def test_a_field_without_a_value_is_refused(scratch: None) -> None:
    job(TYPE, search=("order_id",))(handler)
    with pytest.raises(SearchRefused, match="give a value"):
        search_condition("order_id=  ")
