"""Migration 0017: the job table carries autovacuum settings of its own, set without stopping
writes, and going back resets them to the server's."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.db.migrating import migrate, migrated_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BEFORE = ("django_jobs", "0016_claim_index_reads")
SET = ("django_jobs", "0017_job_table_vacuumed_sooner")
EXPECTED = {"autovacuum_vacuum_scale_factor": "0.01", "autovacuum_vacuum_cost_delay": "0"}


def storage_parameters(table: str = "django_jobs_job") -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
        (options,) = cursor.fetchone()
    return dict(option.split("=", 1) for option in options or [])


@pytest.fixture
def at_0016() -> Iterator[None]:
    with migrated_to(BEFORE):
        yield


def test_the_migrated_job_table_is_vacuumed_sooner_than_the_servers_default() -> None:
    assert storage_parameters() == EXPECTED
    # The migration's own table of values is what the database holds.
    assert importlib.import_module(f"django_jobs.migrations.{SET[1]}").PARAMETERS == EXPECTED
    # Only the job table: the other tables keep the server's settings.
    assert storage_parameters("django_jobs_jobevent") == {}


def test_the_settings_are_set_while_a_write_is_open_and_reset_on_the_way_back(at_0016: None) -> None:
    assert storage_parameters() == {}
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"],
    ) as writer:  # fmt: skip
        # A transaction that enqueued and has not committed holds its lock on the table.
        writer.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts) VALUES ('default', 'test.noop', 1, '{}', 'pending', 0, 0, 5)"
        )
        migrate(SET)  # within the migration's lock_timeout: it does not wait for the writer
        assert storage_parameters() == EXPECTED
        writer.commit()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_jobs_job")
        assert cursor.fetchone() == (1,)

    migrate(BEFORE)
    assert storage_parameters() == {}
