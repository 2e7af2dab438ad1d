"""Migrations 0013 and 0014 on a table that holds jobs, and back: the jobs already scheduled for
later are marked not ready, the claim indexes of both releases coexist between the two steps
(workers of either release claim through their own), and going back restores the previous
layout."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.db.migrating import migrate, migrated_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BEFORE = ("django_jobs", "0012_console_log_owed")
ADDED = ("django_jobs", "0013_ready_jobs_apart_from_later")
DROPPED = ("django_jobs", "0014_drop_claim_indexes_by_priority")
OLD_INDEXES = {"django_jobs_claim_queue", "django_jobs_claim_any"}
NEW_INDEXES = {"django_jobs_ready_queue", "django_jobs_ready", "django_jobs_later"}


def indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'django_jobs_job' AND indexname = ANY(%s)",
            [sorted(OLD_INDEXES | NEW_INDEXES)],
        )
        return {row[0] for row in cursor.fetchall()}


def invalid_indexes() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'django_jobs_job'::regclass AND NOT i.indisvalid"
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def at_0012() -> Iterator[None]:
    with migrated_to(BEFORE):
        yield


def test_the_claim_layout_comes_and_goes_on_a_table_of_jobs(at_0012: None) -> None:
    with connection.cursor() as cursor:
        # 12,000 jobs, more than two batches of the marking: due, scheduled for later, finished.
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
            " attempts, max_attempts, on_lost, finished_at)"
            " SELECT 'default', 'test.noop', 1, '{}', s, 0, now() + make_interval(secs => d), 0, 5,"
            " 'retry', CASE WHEN s = 'completed' THEN now() END"
            " FROM generate_series(1, 12000) AS g,"
            " LATERAL (SELECT (ARRAY['pending', 'pending', 'completed'])[1 + g % 3] AS s,"
            "                 CASE WHEN g % 2 = 0 THEN 3600 ELSE -60 END AS d) AS o"
        )
    assert indexes() == OLD_INDEXES

    migrate(ADDED)
    assert indexes() == OLD_INDEXES | NEW_INDEXES and invalid_indexes() == []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE NOT ready),"
            " count(*) FILTER (WHERE status = 'pending' AND available_at > now() AND NOT ready),"
            " count(*) FILTER (WHERE status = 'pending' AND available_at > now())"
            " FROM django_jobs_job"
        )
        not_ready, later_marked, later = cursor.fetchone()
    # Every pending job scheduled for later is marked, and nothing else.
    assert later > 0 and not_ready == later_marked == later

    migrate(DROPPED)
    assert indexes() == NEW_INDEXES

    migrate(BEFORE)
    assert indexes() == OLD_INDEXES and invalid_indexes() == []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_name = 'django_jobs_job' AND column_name = 'ready'"
        )
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'django_jobs_keep_ready'")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM django_jobs_job")
        assert cursor.fetchone()[0] == 12000  # nothing was copied, moved or lost
