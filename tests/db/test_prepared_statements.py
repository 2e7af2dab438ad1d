"""Prepared statements. By default (``PREPARED_STATEMENTS = None``) enqueue's INSERTs are
prepared on the caller's connection, and a worker's claim and outcome write on its own, and
nothing else is, unless the alias looks pooled in
transaction mode (``DISABLE_SERVER_SIDE_CURSORS``) or sets ``prepare_threshold`` itself. With
psycopg's prepared statements on for the whole connection (``OPTIONS["prepare_threshold"]``, see
docs/scaling.md), django_jobs' own statements are the ones prepared, and prepared they do what
they do unprepared: enqueue one and many, find a unique key's holder, claim, write outcomes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.checks import Warning
from django.db import connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_jobs import enqueue, enqueue_many
from django_jobs.checks import check_database
from django_jobs.conf import jobs_settings
from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.testing import run_one

pytestmark = pytest.mark.django_db


@pytest.fixture
def prepared() -> Iterator[None]:
    """The jobs connection prepares every statement from its first execution."""
    with prepare_threshold(0):
        yield


@pytest.fixture
def unprepared() -> Iterator[None]:
    """Django's default: psycopg prepares nothing (safe behind any connection pooler)."""
    with prepare_threshold(None):
        yield


@contextlib.contextmanager
def prepare_threshold(threshold: int | None) -> Iterator[None]:
    connection = connections[jobs_settings.DATABASE]
    connection.ensure_connection()
    before = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = threshold
    try:
        yield
    finally:
        connection.connection.prepare_threshold = before


def prepared_statements() -> list[str]:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_each_statement_runs_prepared_and_again_from_its_prepared_plan(prepared: None) -> None:
    ended: list[Job] = []
    for round_ in range(3):  # the first round prepares; the next two run the prepared plans
        single = enqueue("test.noop", {"round": round_})
        many = enqueue_many("test.noop", [{"round": round_, "n": n} for n in range(3)])
        held = enqueue("test.noop", {"round": round_}, unique_key=f"report:{round_}")
        assert enqueue("test.noop", {"again": True}, unique_key=f"report:{round_}").id == held.id
        created = {single.id, held.id, *(job.id for job in many)}
        assert len(created) == 5
        while (job := run_one()) is not None:
            ended.append(job)
        assert created <= {job.id for job in ended}

    assert len(ended) == 15
    assert {job.status for job in ended} == {JobStatus.COMPLETED}
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 0
    statements = prepared_statements()
    for fragment in ("INSERT INTO django_jobs_job", "unnest(", "FOR UPDATE SKIP LOCKED"):
        assert any(fragment in statement for statement in statements), (fragment, statements)


@contextlib.contextmanager
def jobs_setting(name: str, value: object) -> Iterator[None]:
    with override_settings(DJANGO_JOBS={**settings.DJANGO_JOBS, name: value}):
        yield


@contextlib.contextmanager
def alias_setting(name: str, value: object) -> Iterator[None]:
    """The jobs alias's Django settings with ``name`` set, as a project would declare them."""
    database = connections[jobs_settings.DATABASE].settings_dict
    missing = object()
    before = database.get(name, missing)
    database[name] = value
    try:
        yield
    finally:
        if before is missing:
            del database[name]
        else:
            database[name] = before


def enqueue_each_way() -> None:
    """Run every statement django_jobs would prepare: the four INSERTs, then a worker's claim
    and its write of plain successes."""
    for n in range(6):  # past psycopg's default threshold of 5
        enqueue("test.noop", {"n": n})
    enqueue("test.noop", {"keyed": True}, unique_key="prepared:key")
    enqueue_many("test.noop", [{"n": n} for n in range(6)])
    enqueue_many("test.noop", [{"n": n} for n in range(3)], unique_key=lambda payload: f"k{payload['n']}")
    while run_one() is not None:
        pass


def test_by_default_the_inserts_and_the_workers_batch_statements_alone_are_prepared(unprepared: None) -> None:
    enqueue_each_way()
    statements = prepared_statements()
    inserts = [s for s in statements if s.startswith(("INSERT INTO django_jobs_job", "WITH made AS (INSERT"))]
    assert len(inserts) == 4, statements  # one and many, each with and without ON CONFLICT
    assert sum("ON CONFLICT" in statement for statement in inserts) == 2
    (claim,) = [s for s in statements if "FOR UPDATE SKIP LOCKED" in s and s not in inserts]
    assert "SET status = 'running'" in claim
    (complete,) = [s for s in statements if s not in inserts and s != claim]
    assert complete.lstrip().startswith("UPDATE django_jobs_job j SET") and "'completed'" in complete
    # The connection itself is as Django opened it: the ORM's statements stay unprepared.
    assert connections[jobs_settings.DATABASE].connection.prepare_threshold is None
    assert len(prepared_statements()) == 6


def test_a_prepared_insert_is_logged_with_its_text_by_default(unprepared: None) -> None:
    connection = connections[jobs_settings.DATABASE]
    enqueue("test.noop", {"n": 0})  # prepares the INSERT
    with CaptureQueriesContext(connection) as queries:
        job = enqueue("test.noop", {"n": 1})  # runs it prepared
    assert [query["sql"][:27] for query in queries] == ["INSERT INTO django_jobs_job"]
    assert Job.objects.get(id=job.id).payload == {"n": 1}
    assert len(prepared_statements()) == 1


def test_turned_off_nothing_is_prepared(unprepared: None) -> None:
    with jobs_setting("PREPARED_STATEMENTS", False):
        enqueue_each_way()
    assert prepared_statements() == []


def test_behind_a_transaction_pooler_nothing_is_prepared(unprepared: None) -> None:
    # DISABLE_SERVER_SIDE_CURSORS is Django's setting for PgBouncer in transaction mode.
    with alias_setting("DISABLE_SERVER_SIDE_CURSORS", True):
        enqueue_each_way()
        assert prepared_statements() == []
        assert check_database() == []


def test_the_connections_own_threshold_rules_when_the_project_sets_one(unprepared: None) -> None:
    with alias_setting("OPTIONS", {"prepare_threshold": None}):
        enqueue_each_way()
    assert prepared_statements() == []


def test_turned_on_it_prepares_even_behind_a_pooler_and_the_check_warns(unprepared: None) -> None:
    with alias_setting("DISABLE_SERVER_SIDE_CURSORS", True), jobs_setting("PREPARED_STATEMENTS", True):
        enqueue("test.noop", {"n": 0})
        assert len(prepared_statements()) == 1
        (warning,) = check_database()
    assert isinstance(warning, Warning) and warning.id == "django_jobs.W002"


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_the_next_enqueue_working(unprepared: None) -> None:
    """psycopg deallocates its prepared statements at a rollback: the next call prepares again,
    and a savepoint rolled back around a prepared INSERT leaves it usable."""
    kept = enqueue("test.noop", {"n": 0})
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("test.noop", {"n": 1})
        raise RuntimeError("the view failed")
    assert prepared_statements() == []  # deallocated with the rollback
    with transaction.atomic():
        again = enqueue("test.noop", {"n": 2})
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue("test.noop", {"n": 3})
            raise RuntimeError("the inner block failed")
        after = enqueue("test.noop", {"n": 4})
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == [0, 2, 4]
    assert {kept.id, again.id, after.id} == set(Job.objects.values_list("id", flat=True))
    assert len(prepared_statements()) == 1


def test_a_prepared_statement_is_logged_with_its_text(prepared: None) -> None:
    # Django's query log (DEBUG, the debug toolbar, CaptureQueriesContext) shows what ran.
    connection = connections[jobs_settings.DATABASE]
    enqueue("test.noop", {"n": 0})  # prepares the INSERT
    with CaptureQueriesContext(connection) as queries:
        enqueue("test.noop", {"n": 1})  # runs it prepared
    assert len(queries) == 1
    assert queries[0]["sql"].startswith("INSERT INTO django_jobs_job"), queries[0]["sql"]
