"""A project whose jobs live on a database of their own (``DJANGO_JOBS["DATABASE"] = "jobs"``),
run as real processes: ``migrate``, the console, ``runjobs``, ``reapjobs``, the reports and
Django's Tasks, while ``default`` holds no job table at all. A query of django_jobs' models
sent to ``default`` would fail there: the test proves none is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.process.workers import FAST_LEASES, ROOT

pytestmark = pytest.mark.slow


def _server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"


@pytest.fixture
def two_databases() -> Iterator[dict[str, str]]:
    """Two new, empty databases, named after this run's test database; dropped afterwards."""
    db = settings.DATABASES["default"]
    base = (db.get("TEST") or {}).get("NAME") or f"test_{db['NAME']}"
    names = {"default": f"{base}_split_default", "jobs": f"{base}_split_jobs"}
    with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
        for name in names.values():
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
    yield names
    with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
        for name in names.values():
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _step(env: dict[str, str], step: str, ids: dict[str, Any] | None = None) -> dict[str, Any]:
    result = _run(env, "-m", "tests.process.jobs_database_project", step, json.dumps(ids or {}))
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen.pop("strays") == [], f"{step} sent queries of the job tables to 'default'"
    return seen


def _tables(name: str) -> set[str]:
    with psycopg.connect(_server_url(name)) as conn:
        query = "SELECT tablename FROM pg_tables WHERE tablename LIKE 'django\\_jobs\\_%'"
        rows = conn.execute(query).fetchall()
    return {row[0] for row in rows}


def test_a_project_with_a_jobs_database_never_touches_job_tables_on_default(
    two_databases: dict[str, str],
) -> None:
    env = {
        **os.environ, **FAST_LEASES,
        "DATABASE_URL": _server_url(two_databases["default"]),
        "JOBS_DATABASE_URL": _server_url(two_databases["jobs"]),
        "DJANGO_JOBS_TICK_EVERY": "3600",  # a declared schedule, run from the console
        "DJANGO_JOBS_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    _run(env, "manage.py", "migrate", "--noinput")
    _run(env, "manage.py", "migrate", "--noinput", "--database", "jobs")
    assert _tables(two_databases["default"]) == set()
    assert "django_jobs_job" in _tables(two_databases["jobs"])

    ids = _step(env, "prepare")
    assert ids.pop("paused") == 302
    first = _run(env, "manage.py", "runjobs", "--burst")

    seen = _step(env, "console", ids)
    assert set(seen["pages"].values()) == {200}, seen["pages"]
    assert set(seen["acted"].values()) == {302}, seen["acted"]
    # Pause, retry, cancel, resume and run-now were logged as they committed; the second
    # pause's event committed but its entry could not be written: it is owed.
    assert seen["logged"] == 5 and seen["owed"] == 1 and seen["queue_events"] == 3
    assert seen["explained"].startswith(f"job {ids['bad']}: no_worker")  # pending, read on 'jobs'
    assert seen["checked"].split(":")[0] in {"OK", "WARNING", "CRITICAL"}, seen["checked"]
    assert seen["task"] == ["SUCCESSFUL", 5]

    second = _run(env, "manage.py", "runjobs", "--burst")
    reaped = json.loads(_run(env, "manage.py", "reapjobs", "--json").stdout)
    assert "failed_steps" not in reaped, reaped

    left = _step(env, "verify", ids)
    assert left["status"] == {"ok": "completed", "bad": "failed", "held": "cancelled"}
    assert ["manual_retry", "ops"] in left["bad_events"]
    assert left["log"][-1] == "paused: second outage" and len(left["log"]) == 6
    assert 0 <= left["late_entry_after_event"] < 0.5 and left["owed"] == 0
    assert not left["silent_worker_kept"] and left["ticked_jobs"] == 1
    for output in (first.stdout + first.stderr, second.stdout + second.stderr):
        assert "does not exist" not in output and "reaper step" not in output
    assert _tables(two_databases["default"]) == set()
