"""Every migration applied, one at a time, under the previous release's workers: before each, jobs
in every status of the schema then; while it runs, old workers enqueue, claim ``FOR UPDATE SKIP
LOCKED``, heartbeat and complete jobs with the previous release's statements; the migrating
connection's ``lock_timeout`` is 2 s, so a migration that waits long for a lock fails here, as
it would hold up the old workers queued behind it on a live system. Then every migration is
unapplied the same way, under workers of the release rolled back to, the waiting steps
cancelled before 0020 is (docs/upgrading.md, "Rolling back").

On a database of its own on the test server (created and dropped here), through
tests/process/live_migrations.py in a subprocess; bench/migration_times.py runs the same on a
million jobs for the figures in docs/upgrading.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.process.live_migrations import migrations

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

#: Migrations allowed to rewrite the job table (a new relfilenode), with the reason. None does:
#: a rewrite holds ACCESS EXCLUSIVE for as long as copying the table takes.
REWRITES_ALLOWED: dict[str, str] = {}

#: The longest an old worker's statement may wait on a migration of this small table. A
#: migration's ACCESS EXCLUSIVE moments last milliseconds here; a statement queued behind a
#: migration that itself waits for a lock waits up to the lock_timeout (2 s) more.
OLD_STATEMENT_WAIT_LIMIT = 6.0


@pytest.fixture(scope="module")
def own_database() -> Iterator[str]:
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_migrations_live"[:63]
    auth = urllib.parse.quote(db["USER"]) + (
        f":{urllib.parse.quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    )
    server = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def steps(own_database: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.process.live_migrations",
            own_database,
            "--lock-timeout",
            "2s",
            "--backwards",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_every_migration_applies_under_the_old_workers_without_a_rewrite(steps: list[dict[str, Any]]) -> None:
    forwards = [step for step in steps if step["direction"] == "forwards"]
    assert [step["migration"] for step in forwards] == migrations()[1:]
    for step in forwards:
        name = step["migration"]
        assert step["lock_timeout"] == "2s"
        assert step["error"] is None, (
            f"{name} failed with lock_timeout = 2s under old workers: {step['error']}"
        )
        before, after = step["relfilenode"]
        assert before == after or name in REWRITES_ALLOWED, f"{name} rewrote the job table"
        assert step["invalid_indexes"] == [], f"{name} left invalid indexes"
        # The jobs written by the previous schema's code keep their status.
        assert step["statuses"][0] == step["statuses"][1], name
        assert step["old_errors"] == [], f"the previous release's statements failed during {name}"
        assert step["old_cycles_after"] > 0, f"the previous release's statements did not run after {name}"
        assert step["old_longest_statement"] < OLD_STATEMENT_WAIT_LIMIT, name


def test_every_migration_unapplies_under_the_workers(steps: list[dict[str, Any]]) -> None:
    backwards = [step for step in steps if step["direction"] == "backwards"]
    assert [step["migration"] for step in backwards] == migrations()[:0:-1]
    for step in backwards:
        name = step["migration"]
        assert step["error"] is None, f"unapplying {name} failed: {step['error']}"
        assert step["invalid_indexes"] == [], f"unapplying {name} left invalid indexes"
        assert step["statuses"][0] == step["statuses"][1], name
        assert step["old_errors"] == [], f"the workers' statements failed while {name} was unapplied"
        assert step["old_cycles_after"] > 0, name
