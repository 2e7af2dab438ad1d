"""The PostgreSQL versions django_jobs runs on: the oldest it accepts (E053), and, in a run of
tests/pg_versions.py, that the server is the major the run is for."""

from __future__ import annotations

import os

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from django_jobs.checks import MIN_POSTGRESQL, check_server_version, server_version_messages


@pytest.mark.parametrize("version_num", [150000, 150014, 160002, 180006])
def test_the_supported_majors_pass(version_num: int) -> None:
    assert server_version_messages("default", version_num) == []


@pytest.mark.parametrize(("version_num", "shown"), [(140011, "14.11"), (130000, "13.0")])
def test_an_older_server_is_refused_naming_the_version_found_and_needed(version_num: int, shown: str) -> None:
    [message] = server_version_messages("jobs", version_num)
    assert isinstance(message, Error) and message.id == "django_jobs.E053"
    assert message.msg == (
        f"The jobs database 'jobs' runs PostgreSQL {shown}; django_jobs needs PostgreSQL 15 or later."
    )
    assert "pg_upgrade" in str(message.hint)


@pytest.mark.django_db
def test_the_server_these_tests_run_on_passes() -> None:
    assert connection.pg_version // 10000 >= MIN_POSTGRESQL
    assert check_server_version(databases=["default"]) == []
    assert check_server_version(databases=None) == []  # `check` without --database asks nothing


@pytest.mark.django_db
def test_check_database_refuses_an_older_server(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the check reads: the server_version_num Django's connection caches.
    monkeypatch.setattr(connection, "pg_version", 140011)
    with pytest.raises(SystemCheckError, match=r"django_jobs\.E053.*PostgreSQL 14\.11"):
        call_command("check", "--database", "default")


#: The supported range (README, docs/configuration.md): a new major is added on purpose.
SUPPORTED_MAJORS = (15, 16, 17, 18)


@pytest.mark.django_db
def test_the_server_is_a_supported_major_and_the_one_this_run_is_for() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        major = int(cursor.fetchone()[0]) // 10000
    assert major in SUPPORTED_MAJORS
    # A run of tests/pg_versions.py names its major: a run that reached another server fails.
    expected = os.environ.get("PG_VERSION_EXPECTED")
    assert expected is None or major == int(expected)
