"""Times the operator console's pages on a jobs table of 1,000,000 rows.

Fills a dedicated database (django_jobs_admin_bench) with a realistic mix — mostly completed
jobs, some thousands failed with error codes and history, pending backlogs on three queues, a
few running (some with expired leases) and jobs waiting for review — then requests each page
through Django's test client, several times, and prints the median and the slowest time and the
number of queries. Run: `.venv/bin/python bench/admin_pages.py [--rows N] [--reps R]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
base = urllib.parse.urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/django_jobs"))
BENCH_DB = "django_jobs_admin_bench"
os.environ["DATABASE_URL"] = base._replace(path=f"/{BENCH_DB}").geturl()

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
    FROM generate_series(1, %(rows)s) AS i
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


def prepare(rows: int) -> None:
    admin_url = base._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone():
            conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_jobs_job")
        if cursor.fetchone()[0] == rows:
            cursor.execute("SELECT 1 FROM django_jobs_jobevent WHERE actor = 'bench-chatty' LIMIT 1")
            if cursor.fetchone():
                return
        started = time.perf_counter()
        cursor.execute("TRUNCATE django_jobs_job, django_jobs_jobevent CASCADE")
        cursor.execute(FILL, {"rows": rows})
        cursor.execute(EVENTS)
        cursor.execute(CHATTY)
        cursor.execute(HEAVY)
        cursor.execute("VACUUM ANALYZE django_jobs_job")
        cursor.execute("VACUUM ANALYZE django_jobs_jobevent")
        print(f"filled {rows:,} jobs in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    prepare(args.rows)

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from django_jobs.models import Job, JobEvent

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
        "dashboard": "/admin/django_jobs/job/dashboard/",
    }
    print(f"{Job.objects.count():,} jobs; {args.reps} requests per page after one warm-up")
    print(f"{'page':40} {'median ms':>10} {'max ms':>9} {'queries':>8}")
    for name, url in pages.items():
        client.get(url)  # warm-up: caches, prepared plans
        timings = []
        for _ in range(args.reps):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append(1000 * (time.perf_counter() - started))
            assert response.status_code == 200, (url, response.status_code)
        print(f"{name:40} {statistics.median(timings):10.1f} {max(timings):9.1f} {len(queries):8d}")


if __name__ == "__main__":
    main()
