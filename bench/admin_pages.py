"""Times the operator console's pages on a jobs table of 1,000,000 rows (or --rows N).

Fills a dedicated database (django_jobs_admin_bench; django_jobs_admin_bench_10m from 10,000,000
rows, or --database NAME) with a realistic mix — mostly completed jobs, 2 % failed with error
codes and history, pending backlogs on three queues, a few running (some with expired leases) and
jobs waiting for review, every share a fraction of N; one job with 10,000 events and the newest
50 with 256 KiB payloads whatever N — then requests each page and the metrics view's scrape
(``/jobs/metrics``) through Django's test client, several times, and prints the median and the
slowest time, the number of queries, and the most rows of the job and event tables one of the
page's statements read (one more request, not timed, with ``auto_explain``). Run:
`.venv/bin/python bench/admin_pages.py [--rows N] [--reps R] [--database NAME] [--keep]`.

The fill inserts 1,000,000 rows a statement, each committed, then runs VACUUM ANALYZE, and
prints how long it took (10,000,000 rows: minutes). Every run refills, unless ``--keep`` and the
database holds N jobs already. Timestamps are relative to the fill: leases expire a minute
after it, and a kept fill's last hour empties, so the dashboard's and the stale list's figures
on a kept fill of yesterday are not those of a fresh one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
base = urllib.parse.urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/django_jobs"))
BENCH_DB = "django_jobs_admin_bench"
#: Rows per INSERT statement of the fill, each committed: a 10,000,000-row fill in ten.
CHUNK = 1_000_000

import psycopg  # noqa: E402

FILL = """
INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at, attempts,
    max_attempts, unique_key, worker_id, execution_id, started_at, heartbeat_at, lease_expires_at,
    last_error_code, last_error, created_at, completed_at, failed_at, finished_at, progress)
SELECT q, t, 1, jsonb_build_object('order', i), s, 0, now() - make_interval(secs => i %% 86400),
       CASE WHEN s = 'failed' THEN 5 ELSE 1 END, 5,
       CASE WHEN i %% 10 = 0 THEN 'order:' || i END,
       CASE WHEN s IN ('running', 'completed', 'failed') THEN 'web-1:' || (i %% 7) END,
       CASE WHEN s <> 'pending' THEN gen_random_uuid() END,
       CASE WHEN s <> 'pending' THEN now() - make_interval(secs => i %% 86400) END,
       CASE WHEN s = 'running' THEN now() - make_interval(secs => i %% 120) END,
       CASE WHEN s = 'running' THEN now() + make_interval(secs => 60 - i %% 120) END,
       CASE WHEN s IN ('failed', 'needs_review') THEN (ARRAY['PROVIDER_5XX', 'NETWORK_TIMEOUT', 'AUTH_FAILED',
            'PAYLOAD_INVALID', 'LEASE_LOST'])[1 + i %% 5] END,
       CASE WHEN s = 'failed' THEN 'RetryableError: provider answered 503' END,
       now() - make_interval(secs => i %% 86400 + 5),
       CASE WHEN s = 'completed' THEN now() - make_interval(secs => i %% 86400) + interval '0.2 s' END,
       CASE WHEN s = 'failed' THEN now() - make_interval(secs => i %% 86400) END,
       CASE WHEN s IN ('completed', 'failed', 'skipped', 'cancelled')
            THEN now() - make_interval(secs => i %% 86400) END,
       CASE WHEN s = 'running' THEN '{"done": 3, "total": 10}'::jsonb END
FROM (
    SELECT i,
           (ARRAY['default', 'emails', 'integrations'])[1 + i %% 3] AS q,
           (ARRAY['billing.charge', 'emails.send', 'reports.build', 'crm.sync', 'documents.ocr'])
               [1 + i %% 5] AS t,
           CASE WHEN i %% 50 = 1 THEN 'failed' WHEN i %% 40 = 2 THEN 'pending'
                WHEN i %% 2000 = 3 THEN 'running'
                WHEN i %% 1000 = 4 THEN 'needs_review' WHEN i %% 300 = 5 THEN 'cancelled'
                WHEN i %% 200 = 6 THEN 'skipped' ELSE 'completed' END AS s
    FROM generate_series(%(first)s, %(last)s) AS i
) AS rows
"""
EVENTS = """
INSERT INTO django_jobs_jobevent
    (job_id, kind, from_status, to_status, attempt, error_code, error, actor, created_at)
SELECT id, 'retry_scheduled', 'running', 'pending', a, last_error_code, last_error, 'worker',
       now() - make_interval(secs => a * 60)
FROM django_jobs_job, generate_series(1, 4) AS a WHERE status = 'failed'
"""
# The heavy cases: one failed job retried by hand 10,000 times (its history), and the newest 50
# jobs carrying the largest payload enqueue accepts (the first page of the list).
CHATTY = """
INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason, created_at)
SELECT (SELECT max(id) FROM django_jobs_job WHERE status = 'failed'), 'manual_retry', 'failed', 'pending',
       0, 'bench-chatty', 'retried by hand, #' || n, now() - make_interval(secs => 10000 - n)
FROM generate_series(1, 10000) AS n
"""
HEAVY = """
UPDATE django_jobs_job SET payload = jsonb_build_object('blob', repeat(md5(id::text), 8192))
WHERE id > (SELECT max(id) - 50 FROM django_jobs_job)
"""


def default_database(rows: int) -> str:
    """The bench database of a fill of ``rows``: one per size from 10,000,000 rows, so a 1M and
    a 10M fill can both be kept."""
    return BENCH_DB if rows < 10_000_000 else f"{BENCH_DB}_{rows // 1_000_000}m"


def prepare(rows: int, database: str, keep: bool) -> None:
    """Creates and migrates ``database``, and fills it with ``rows`` jobs unless ``keep`` and it
    holds them already."""
    admin_url = base._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection

    with connection.cursor() as cursor:
        if keep:
            cursor.execute("SELECT count(*) FROM django_jobs_job")
            held = cursor.fetchone()[0]
            cursor.execute("SELECT 1 FROM django_jobs_jobevent WHERE actor = 'bench-chatty' LIMIT 1")
            if held == rows and cursor.fetchone():
                cursor.execute(
                    "SELECT last_vacuum, now() - last_vacuum FROM pg_stat_user_tables"
                    " WHERE relname = 'django_jobs_job'"
                )
                filled, age = cursor.fetchone()
                print(f"kept the fill of {rows:,} jobs in {database} (vacuumed {filled}, {age} ago)")
                return
            print(f"--keep: {database} holds {held:,} jobs, not {rows:,}: filling it")
        started = time.perf_counter()
        cursor.execute("TRUNCATE django_jobs_job, django_jobs_jobevent CASCADE")
        for first in range(1, rows + 1, CHUNK):
            last = min(first + CHUNK - 1, rows)
            cursor.execute(FILL, {"first": first, "last": last})  # autocommit: one transaction each
            if rows > CHUNK:
                print(f"  {last:,} / {rows:,} jobs, {time.perf_counter() - started:.0f} s", flush=True)
        inserted = time.perf_counter()
        cursor.execute(EVENTS)
        cursor.execute(CHATTY)
        cursor.execute(HEAVY)
        events = time.perf_counter()
        cursor.execute("VACUUM ANALYZE django_jobs_job")
        cursor.execute("VACUUM ANALYZE django_jobs_jobevent")
        done = time.perf_counter()
        print(
            f"filled {rows:,} jobs in {database} in {done - started:.0f} s (jobs {inserted - started:.0f} s,"
            f" events and payloads {events - inserted:.0f} s, VACUUM ANALYZE {done - events:.0f} s)"
        )


#: The tables whose rows "rows read" counts.
READ_TABLES = ("django_jobs_job", "django_jobs_jobevent")


def rows_read(plan: dict[str, Any]) -> int:
    """How many rows the plan's scans of the job and event tables read, kept or filtered out, in
    all loops (as tests/db/test_guard_plans.py counts them)."""
    read = 0
    if plan.get("Relation Name") in READ_TABLES and "Scan" in plan["Node Type"]:
        per_loop = (
            plan.get("Actual Rows", 0)  # absent from a node never executed
            + plan.get("Rows Removed by Filter", 0)
            + plan.get("Rows Removed by Index Recheck", 0)
        )
        read += int(per_loop * plan.get("Actual Loops", 0))
    return read + sum(rows_read(child) for child in plan.get("Plans", []))


def most_rows_read(client: Any, url: str) -> int:
    """The most rows one statement of the page read: one more request, with ``auto_explain``
    reporting each statement's plan (with row counts, no timing) to the client as a notice."""
    from django.db import connection

    found: list[dict[str, Any]] = []

    def keep(diagnostic: Any) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            found.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    with connection.cursor() as cursor:
        for statement in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_timing = off",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            cursor.execute(statement)
    connection.connection.add_notice_handler(keep)
    try:
        response = client.get(url)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # a plan is reported when its portal closes
    finally:
        connection.connection.remove_notice_handler(keep)
        with connection.cursor() as cursor:
            cursor.execute("SET auto_explain.log_min_duration = -1")
            cursor.execute("RESET client_min_messages")
    assert response.status_code == 200, (url, response.status_code)
    return max((rows_read(plan) for plan in found), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--database",
        help=f"the bench database (default {BENCH_DB}, {BENCH_DB}_10m from 10,000,000 rows)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="reuse the database's fill if it holds --rows jobs"
    )
    args = parser.parse_args()
    database = args.database or default_database(args.rows)
    os.environ["DATABASE_URL"] = base._replace(path=f"/{database}").geturl()
    prepare(args.rows, database, args.keep)

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    import django_jobs
    from django_jobs.models import Job, JobEvent

    print(f"django_jobs from {Path(django_jobs.__file__).parent}")

    setup_test_environment()
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "", "bench"
    )
    client = Client()
    client.force_login(user)
    failed = Job.objects.filter(status="failed").order_by("-id").values_list("id", flat=True).first()
    keyed = (
        Job.objects.filter(unique_key__isnull=False)
        .order_by("-id")
        .values_list("unique_key", flat=True)
        .first()
    )
    chatty = Job.objects.filter(events__actor="bench-chatty").values_list("id", flat=True).first()
    middle = JobEvent.objects.filter(job_id=chatty).order_by("id").values_list("id", flat=True)[5000]
    thousand = ",".join(
        map(str, Job.objects.filter(status="failed").order_by("-id").values_list("id", flat=True)[:1000])
    )
    pages = {
        "list, no filter": "/admin/django_jobs/job/",
        "list, page 200": "/admin/django_jobs/job/?p=200",
        "list, status=failed": "/admin/django_jobs/job/?status=failed",
        "list, status=pending, queue=emails": "/admin/django_jobs/job/?status=pending&queue=emails",
        "list, type=crm.sync": "/admin/django_jobs/job/?type=crm.sync",
        "list, error code LEASE_LOST": "/admin/django_jobs/job/?error_code=LEASE_LOST",
        "list, failed now with PROVIDER_5XX": "/admin/django_jobs/job/?failed_code=PROVIDER_5XX",
        "list, stale running": "/admin/django_jobs/job/?attention=stale",
        "list, needs review": "/admin/django_jobs/job/?attention=review",
        "search by id": f"/admin/django_jobs/job/?q={failed}",
        "search by unique key": f"/admin/django_jobs/job/?q={keyed}",
        "detail of a failed job": f"/admin/django_jobs/job/{failed}/change/",
        "detail, 10,000 events": f"/admin/django_jobs/job/{chatty}/change/",
        "detail, 10,000 events, older page": f"/admin/django_jobs/job/{chatty}/change/?events_before="
        f"{middle}",
        "retry confirmation, 1,000 jobs": f"/admin/django_jobs/job/act/retry/?ids={thousand}",
        # Every failed job of the fill has this code: 2 % of the table, over one day.
        "retry all matching, NETWORK_TIMEOUT, 1 h": "/admin/django_jobs/job/bulk/retry/"
        "?failed_code=NETWORK_TIMEOUT&ended=1h",
        "retry all matching, NETWORK_TIMEOUT": "/admin/django_jobs/job/bulk/retry/"
        "?failed_code=NETWORK_TIMEOUT",
        "cancel all matching, queue=emails": "/admin/django_jobs/job/bulk/cancel/?queue=emails",
        "dashboard": "/admin/django_jobs/job/dashboard/",
        "metrics scrape": "/jobs/metrics",
    }
    print(f"{Job.objects.count():,} jobs; {args.reps} requests per page after one warm-up")
    print(f"{'page':40} {'median ms':>10} {'max ms':>9} {'queries':>8} {'rows read':>10}")
    for name, url in pages.items():
        client.get(url)  # warm-up: caches, prepared plans
        timings = []
        for _ in range(args.reps):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append(1000 * (time.perf_counter() - started))
            assert response.status_code == 200, (url, response.status_code)
        count = len(queries)  # before the next request empties connection.queries
        read = most_rows_read(client, url)
        print(
            f"{name:40} {statistics.median(timings):10.1f} {max(timings):9.1f} {count:8d} {read:10,d}",
            flush=True,
        )


if __name__ == "__main__":
    main()
