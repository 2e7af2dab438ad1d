"""A worker keeps every module it imports for its life: `manage.py runjobs` loads the optional
parts (the process pool, the metrics port's HTTP server, the migration files) only when used.
Read from the ``sys.modules`` of a real worker process that ran a job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from django_jobs import enqueue
from tests.process.workers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

#: runjobs ARGS, then the modules it reports in sys.modules at its end.
RUN_AND_REPORT = """
import json, sys
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "runjobs", *sys.argv[1:]])
print(json.dumps(sorted(sys.modules)))
"""

OPTIONAL = {
    "process pool": ("multiprocessing", "django_jobs.runtime.process_pool"),
    "metrics port": ("http.server", "django_jobs.observe.probe_server"),
}


def modules_of_a_worker(worker_env: dict[str, str], *args: str) -> set[str]:
    enqueue("test.noop", {})
    result = subprocess.run(
        [sys.executable, "-c", RUN_AND_REPORT, "--burst", "-v", "0", *args],
        cwd=ROOT, env={**worker_env, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_a_thread_pool_worker_loads_no_optional_part(worker_env: dict[str, str]) -> None:
    modules = modules_of_a_worker(worker_env)
    assert "django_jobs.runtime.worker" in modules  # the report is the worker's own
    for part in ("process pool", "metrics port"):
        assert not set(OPTIONAL[part]) & modules, part
    # The schema check at start-up reads the migration records; a migration file is imported
    # only to name what is missing (tests/db/test_unmigrated.py).
    assert "django_jobs.migrations.0001_initial" not in modules
    assert "statistics" not in modules


def test_a_process_pool_worker_loads_the_process_pool(worker_env: dict[str, str]) -> None:
    modules = modules_of_a_worker(worker_env, "--pool", "process")
    assert set(OPTIONAL["process pool"]) <= modules
    assert not set(OPTIONAL["metrics port"]) & modules


def test_a_worker_with_a_metrics_port_loads_its_http_server(worker_env: dict[str, str]) -> None:
    modules = modules_of_a_worker(worker_env, "--metrics-port", "0")
    assert set(OPTIONAL["metrics port"]) <= modules
    assert not set(OPTIONAL["process pool"]) & modules


def test_a_worker_behind_on_another_apps_migration_still_warns_of_it(worker_env: dict[str, str]) -> None:
    # The start-up warning is Django's; the worker only skips it when the records say
    # every migration file is applied.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'testjobs' AND name = '0003_keyedrun'"
            " RETURNING applied"
        )
        (applied,) = cursor.fetchone()
    try:
        modules = modules_of_a_worker(worker_env)
        result = subprocess.run(
            [sys.executable, "manage.py", "runjobs", "--burst"], cwd=ROOT, env=worker_env,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO django_migrations (app, name, applied) VALUES ('testjobs', '0003_keyedrun', %s)",
                [applied],
            )
    assert "django_jobs.migrations.0001_initial" in modules  # Django's plan read the files
    assert result.returncode == 0, result.stdout + result.stderr
    assert "You have 1 unapplied migration(s)" in result.stdout + result.stderr
    assert "testjobs" in result.stdout
