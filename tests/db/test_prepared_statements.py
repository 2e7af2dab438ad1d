"""With psycopg's prepared statements on (Django's ``OPTIONS["prepare_threshold"]``, see
docs/scaling.md), django_jobs' own statements are the ones prepared, and prepared they do what
they do unprepared: enqueue one and many, find a unique key's holder, claim, write outcomes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_jobs import enqueue, enqueue_many
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


def test_without_a_threshold_nothing_is_prepared(unprepared: None) -> None:
    # No statement of ours asks for preparation by itself (no prepare=True).
    for n in range(6):  # past psycopg's default threshold of 5
        enqueue("test.noop", {"n": n})
    enqueue_many("test.noop", [{"n": n} for n in range(6)])
    while run_one() is not None:
        pass
    assert prepared_statements() == []


def test_a_prepared_statement_is_logged_with_its_text(prepared: None) -> None:
    # Django's query log (DEBUG, the debug toolbar, CaptureQueriesContext) shows what ran.
    connection = connections[jobs_settings.DATABASE]
    enqueue("test.noop", {"n": 0})  # prepares the INSERT
    with CaptureQueriesContext(connection) as queries:
        enqueue("test.noop", {"n": 1})  # runs it prepared
    assert len(queries) == 1
    assert queries[0]["sql"].startswith("INSERT INTO django_jobs_job"), queries[0]["sql"]


def test_a_prepared_claim_prepares_the_claim_alone_and_claims_from_its_plan(
    unprepared: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_jobs.transitions import execution

    monkeypatch.setattr(execution, "PREPARE_CLAIM", True)
    ended: list[Job] = []
    for round_ in range(7):  # past the server's five custom plans: the later rounds may run a generic one
        created = {job.id for job in enqueue_many("test.noop", [{"round": round_, "n": n} for n in range(2)])}
        while (job := run_one()) is not None:
            ended.append(job)
        assert created <= {job.id for job in ended}
    assert len(ended) == 14
    assert {job.status for job in ended} == {JobStatus.COMPLETED}
    statements = prepared_statements()
    assert statements and all("FOR UPDATE SKIP LOCKED" in statement for statement in statements), statements
