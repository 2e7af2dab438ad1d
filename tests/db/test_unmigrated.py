"""Commands run on a database that ``manage.py migrate`` has not prepared: one sentence that says
to run it, exit status 2, and nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings

from tests.process.workers import ROOT


def server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


@pytest.fixture
def unmigrated_url() -> Iterator[str]:
    """A new, empty database on the test server: what a project has before its first migrate."""
    name = f"{settings.DATABASES['default']['NAME']}_unmigrated"
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield server_url(name)
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**os.environ, "DATABASE_URL": url},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        ["runjobs", "--burst"],
        ["reapjobs"],
        ["checkjobs"],
        ["explainjob", "1"],
        ["jobsqueue", "list"],
        ["jobsindexes", "--create"],
    ],
)
def test_a_command_on_an_unmigrated_database_says_run_migrate_and_exits_2(
    unmigrated_url: str, command: list[str]
) -> None:
    result = manage(unmigrated_url, *command)
    assert result.returncode == 2, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "run manage.py migrate" in result.stderr
    assert "django_jobs.0001_initial" in result.stderr
    assert "Traceback" not in output
    assert "worker started" not in output
    with psycopg.connect(unmigrated_url) as conn:  # nothing was written: not even a worker row
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


def test_a_separate_jobs_database_that_is_not_migrated_is_named_with_the_migrate_to_run(
    unmigrated_url: str,
) -> None:
    business = server_url(settings.DATABASES["default"]["NAME"])  # migrated: the test database
    result = subprocess.run(
        [sys.executable, "manage.py", "runjobs", "--burst"], cwd=ROOT,
        env={**os.environ, "DATABASE_URL": business, "JOBS_DATABASE_URL": unmigrated_url},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "database 'jobs' lacks django_jobs' tables" in result.stderr
    assert result.stderr.rstrip().endswith("run manage.py migrate --database jobs")


@pytest.mark.slow
def test_a_worker_on_a_database_one_migration_behind_names_the_missing_one(unmigrated_url: str) -> None:
    latest = sorted(p.stem for p in (ROOT / "django_jobs" / "migrations").glob("0*.py"))
    assert manage(unmigrated_url, "migrate", "django_jobs", latest[-2], "-v", "0").returncode == 0
    result = manage(unmigrated_url, "runjobs", "--burst")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"1 unapplied migration(s): django_jobs.{latest[-1]}): run manage.py migrate" in result.stderr
    assert "worker started" not in result.stdout + result.stderr


def test_a_migrated_database_passes_the_check(db: None) -> None:
    from django_jobs.schema import require_migrated, unapplied_migrations

    assert unapplied_migrations("default") == []
    require_migrated()  # raises nothing
