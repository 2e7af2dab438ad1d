"""django_jobs's migrations applied one at a time to a live job table: before each, jobs are
written in every status the previous migration's schema holds, and "old workers" (the previous
release's statements, in raw SQL) insert, claim ``FOR UPDATE SKIP LOCKED``, heartbeat and
complete jobs on connections of their own while the migration runs, and after it.

Run as ``python -m tests.process.live_migrations DATABASE_URL [--rows N] [--lock-timeout 2s]
[--backwards]`` from the project's root, on a database of its own (created empty by the
caller); ``--backwards`` then unapplies the migrations one at a time, under the workers of the
release rolled back to. It prints one JSON line per migration: its name, seconds, the locks it
was seen holding on the job table, the table's relfilenode before and after, the longest
statement of the old workers while it ran, their errors, their cycles after it, the jobs of each
status before and after, and the indexes left invalid. tests/process/test_migrations_live.py
asserts on them; bench/migration_times.py runs it on a million jobs.

``--rows N`` writes N jobs at the first migration's schema (the bench's table) and then,
before each migration, a few more in every status of the schema then.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import threading
import time
from typing import Any

import psycopg

from tests.process.old_release import OldWorkers

#: The statuses of a job at each schema (``waiting`` arrived with workflows, 0020).
STATUSES = ("pending", "running", "completed", "failed", "skipped", "cancelled", "needs_review")

#: Jobs of each status written before each migration, in queue ``states``.
PER_STATUS = 5


#: The migration of the status ``waiting``: unapplying it needs no job waiting (docs/upgrading.md).
WORKFLOWS = "0020_workflows"
#: What cancelling their workflows does to the waiting steps, as far as the job table goes.
CANCEL_WAITING = (
    "UPDATE django_jobs_job SET status = 'cancelled', finished_at = now() WHERE status = 'waiting'"
)


def job_columns(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'django_jobs_job'"
    ).fetchall()
    return {name for (name,) in rows}


def write_jobs(conn: psycopg.Connection[Any], rows: int, queue: str, offset: int = 0) -> None:
    """``rows`` jobs spread over every status the table's schema holds now, in one statement:
    pending ones due and scheduled for later, some with unique keys, running ones with a live
    lease, finished ones with their times and errors; columns of later schemas are left out."""
    statuses = list(STATUSES) + (["waiting"] if "workflow_id" in job_columns(conn) else [])
    workflow = ", CASE WHEN s = 'waiting' THEN g END" if "workflow_id" in job_columns(conn) else ""
    conn.execute(
        f"""
        INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,
            attempts, max_attempts, unique_key, worker_id, execution_id, started_at, heartbeat_at,
            lease_expires_at, last_error_code, last_error, completed_at, failed_at, finished_at
            {", workflow_id" if workflow else ""})
        SELECT %(queue)s, 'old.noop', 1, jsonb_build_object('n', g), s, (g %% 3) - 1,
               now() + CASE WHEN s = 'pending' AND g %% 2 = 0 THEN interval '1 hour' ELSE interval '0' END,
               CASE WHEN s IN ('pending', 'waiting') THEN 0 ELSE 1 END, 5,
               CASE WHEN s IN ('pending', 'needs_review') AND g %% 4 = 1 THEN 'key-' || g END,
               CASE WHEN s <> 'pending' THEN 'old-host:1:x' END,
               CASE WHEN s NOT IN ('pending', 'waiting') THEN gen_random_uuid() END,
               CASE WHEN s NOT IN ('pending', 'waiting') THEN now() END,
               CASE WHEN s NOT IN ('pending', 'waiting') THEN now() END,
               CASE WHEN s = 'running' THEN now() + interval '1 hour' END,
               CASE WHEN s IN ('failed', 'needs_review') THEN 'Boom' END,
               CASE WHEN s IN ('failed', 'needs_review') THEN 'boom' END,
               CASE WHEN s = 'completed' THEN now() END,
               CASE WHEN s = 'failed' THEN now() END,
               CASE WHEN s IN ('completed', 'failed', 'skipped', 'cancelled', 'needs_review') THEN now() END
               {workflow}
        FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
             LATERAL (SELECT (%(statuses)s::text[])[1 + g %% %(kinds)s::int] AS s) AS status
        """,
        {
            "queue": queue,
            "first": offset + 1,
            "last": offset + rows,
            "statuses": statuses,
            "kinds": len(statuses),
        },
    )


class LockWatch:
    """The locks a backend was seen holding on the job table, sampled every few milliseconds
    (a lock held for less may go unseen: the docs name each one from the SQL, this confirms)."""

    def __init__(self, url: str, pid: int) -> None:
        self.modes: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, pid), daemon=True)

    def __enter__(self) -> LockWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self, url: str, pid: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT mode FROM pg_locks WHERE pid = %s AND granted AND locktype = 'relation'"
                    " AND relation = (SELECT oid FROM pg_class WHERE relname = 'django_jobs_job')",
                    [pid],
                ).fetchall()
                self.modes.update(mode for (mode,) in rows)
                time.sleep(0.002)


def table_facts(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    (relfilenode,) = conn.execute(
        "SELECT relfilenode FROM pg_class WHERE oid = 'django_jobs_job'::regclass"
    ).fetchone()  # type: ignore[misc]
    statuses = dict(
        conn.execute(
            "SELECT status, count(*) FROM django_jobs_job WHERE queue = 'states' GROUP BY 1"
        ).fetchall()
    )  # type: ignore[arg-type]
    invalid = [name for (name,) in conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'django_jobs_job'::regclass AND NOT i.indisvalid"
    )]  # fmt: skip
    return {"relfilenode": relfilenode, "statuses": statuses, "invalid": invalid}


def migrations() -> list[str]:
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    return [
        name
        for app, name in loader.graph.forwards_plan(
            ("django_jobs", loader.graph.leaf_nodes("django_jobs")[0][1])
        )
        if app == "django_jobs"
    ]


def migrate(name: str) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    MigrationExecutor(connection).migrate([("django_jobs", name)])


def step(conn: psycopg.Connection[Any], url: str, target: str, previous: str, applied: str) -> dict[str, Any]:
    """Migrate to ``target`` (``applied``: the migration applied or unapplied) while workers of
    the release whose last migration is ``previous`` run: forwards, the release before the
    upgrade; backwards, the release already rolled back to (its code goes back first)."""
    from django.db import connection

    before = table_facts(conn)
    workers = OldWorkers(url, previous).start()
    workers.wait_for_cycles(2)  # every thread is at work
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)  # reading the migrations' files is not timed
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        (lock_timeout,) = cursor.fetchone()
    error = None
    began = time.monotonic()
    with LockWatch(url, pid) as locks:
        try:
            executor.migrate([("django_jobs", target)])
        except Exception as exc:  # reported: the caller judges
            error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - began
    cycles = workers.cycles
    # Two cycles more: a statement the migration blocked has ended, its wait counted, and the
    # statements ran again on the new schema.
    workers.wait_for_cycles(cycles + 2)
    stall = workers.longest
    workers.stop()
    after = table_facts(conn)
    return {
        "migration": applied, "seconds": round(seconds, 3),
        "lock_timeout": lock_timeout, "error": error, "locks": sorted(locks.modes),
        "relfilenode": [before["relfilenode"], after["relfilenode"]],
        "old_longest_statement": round(stall, 3), "old_errors": workers.errors,
        "old_cycles_after": workers.cycles - cycles,
        "statuses": [before["statuses"], after["statuses"]], "invalid_indexes": after["invalid"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rows", type=int, default=0, help="jobs written at the first migration's schema")
    parser.add_argument("--lock-timeout", default="0", help="the migrating connection's lock_timeout")
    parser.add_argument("--backwards", action="store_true", help="then unapply them one at a time")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = args.url
    # The job tables on that database alone, whatever the caller's environment routes elsewhere.
    for routed in ("JOBS_DATABASE_URL", "CONSOLE_DATABASE_URL", "LISTEN_DATABASE_URL"):
        os.environ.pop(routed, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django
    from django.conf import settings

    django.setup()
    settings.DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        f"-c lock_timeout={args.lock_timeout}"
    )
    names = migrations()
    url = args.url.split("?")[0]
    migrate(names[0])
    with psycopg.connect(url, autocommit=True) as conn:
        if args.rows:
            write_jobs(conn, args.rows, "states")
            conn.execute("VACUUM ANALYZE django_jobs_job")
        written = args.rows
        for previous, name in itertools.pairwise(names):
            batch = PER_STATUS * (len(STATUSES) + 1)
            write_jobs(conn, batch, "states", offset=written)
            written += batch
            result = step(conn, url, name, previous, name)
            print(json.dumps({"direction": "forwards", **result}), flush=True)
            if result["error"]:
                return
        if args.backwards:
            for previous, name in reversed(list(itertools.pairwise(names))):
                if name == WORKFLOWS:
                    conn.execute(CANCEL_WAITING)
                result = step(conn, url, previous, previous, name)
                print(json.dumps({"direction": "backwards", **result}), flush=True)
                if result["error"]:
                    return


if __name__ == "__main__":
    main()
