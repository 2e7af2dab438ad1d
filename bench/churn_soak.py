"""A million jobs through enqueue → complete → retention, at full speed: does anything grow?

``.venv/bin/python bench/churn_soak.py [--jobs 1000000 | --minutes 30] [--rate R] [--prefill N]
[--retention 10] [--reaper-interval 5] [--own-cluster [-c NAME=VALUE ...]]``

On the dedicated database ``django_jobs_bench`` (dropped, re-created and migrated) — or, with
``--own-cluster``, on a PostgreSQL cluster of its own (``initdb`` in a temporary directory, stock
settings but for the ``-c`` ones, removed at the end), since autovacuum may be off on a shared
server — one
``runjobs`` process (defaults, but completed jobs kept ``--retention`` seconds and a reaper pass
every ``--reaper-interval`` seconds) drains no-op jobs while this process keeps a backlog of
about ``--backlog`` jobs with ``enqueue_many`` (1,000 per call), or enqueues ``--rate`` jobs a
second, until ``--jobs`` were enqueued, or, with ``--minutes``, for that long (then the backlog
drains). ``--prefill N`` first puts N jobs completed a day ago in the table: with a long
``--retention``, the table autovacuum's scale factor is a share of.

Every ``--every`` seconds it prints the jobs finished in that interval (jobs/s), the live rows in
the job table (``n_live_tup``), and the sizes of the job table, its indexes and the events
table. At the end it compares the last intervals with the first ones after warm-up: throughput
and sizes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from drain import bench_url, recreate_database  # noqa: E402

_SIZES = (
    "SELECT pg_table_size('django_jobs_job'), pg_indexes_size('django_jobs_job'),"
    " pg_total_relation_size('django_jobs_jobevent'),"
    " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'django_jobs_job'),"
    " (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'django_jobs_job')"
)
# A table that has kept a day of finished jobs: the size autovacuum's scale factor is a share of.
_PREFILL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at, attempts,"
    " max_attempts, on_lost, started_at, completed_at, finished_at) SELECT 'default', 'test.noop', 1, '{}',"
    " 'completed', 0, now() - interval '1 day', 1, 5, 'retry', now() - interval '1 day',"
    " now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, %s)"
)
# The rows of the job table as the statistics count them: count(*) would read the whole table
# every sample, and with a long retention that is millions of rows.
_ROWS = "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'django_jobs_job'"
# The jobs not finished yet, read the way the claim reads them: the pending ones down the claim
# index in its order, at most the backlog's worth, and the running ones by their lease. A bitmap
# scan of the status index would read, at every turn, the entries of every job claimed since
# vacuum last ran (a bitmap scan never marks an entry dead): the soak's own count, not the
# worker, would set the pace.
_ACTIVE = (
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM django_jobs_job WHERE status = 'pending' AND ready"
    " AND type = 'test.noop' AND version = 1 ORDER BY priority DESC, available_at, id LIMIT %(cap)s) p)"
    " + (SELECT count(*) FROM django_jobs_job WHERE status = 'running' AND lease_expires_at > '-infinity')"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--minutes", type=float, default=None, help="enqueue for this long instead of --jobs jobs"
    )
    parser.add_argument("--backlog", type=int, default=20_000, help="pending jobs kept ahead of the worker")
    parser.add_argument(
        "--rate", type=float, default=None, help="jobs enqueued a second, instead of a backlog kept"
    )
    parser.add_argument(
        "--prefill", type=int, default=0, help="completed jobs already in the table (finished a day ago)"
    )
    parser.add_argument("--retention", type=float, default=10.0, help="seconds completed jobs are kept")
    parser.add_argument("--reaper-interval", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between two samples")
    parser.add_argument("--own-cluster", action="store_true", help="run on a throwaway cluster of its own")
    parser.add_argument("-c", action="append", default=[], metavar="NAME=VALUE", help="its server settings")
    args = parser.parse_args()

    cluster = None
    if args.own_cluster:
        from tests.process.throwaway_pg import ThrowawayCluster

        cluster = ThrowawayCluster(**dict(setting.split("=", 1) for setting in args.c))
        cluster.create()
        url = cluster.url
    else:
        url = bench_url()
        recreate_database(url)
    try:
        soak(args, url)
    finally:
        if cluster is not None:
            cluster.destroy()


def soak(args: argparse.Namespace, url: str) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DJANGO_JOBS_COMPLETED_RETENTION": str(args.retention),
        "DJANGO_JOBS_REAPER_INTERVAL": str(args.reaper_interval),
    }
    env.pop("DEBUG", None)
    os.environ.update(env)
    import django
    import psycopg
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_jobs import enqueue_many

    with psycopg.connect(url, autocommit=True) as conn:
        if args.prefill:
            conn.execute(_PREFILL, [args.prefill])
            conn.execute("VACUUM ANALYZE django_jobs_job")
        settings = conn.execute(
            "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings"
            " WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',"
            " 'autovacuum_vacuum_cost_delay', 'autovacuum_vacuum_cost_limit', 'synchronous_commit')"
        ).fetchone()[0]  # type: ignore[index]
        table_options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'django_jobs_job'::regclass"
        ).fetchone()[0]  # type: ignore[index]
    print(f"PostgreSQL: {settings}")
    print(f"the job table's storage parameters: {', '.join(table_options or ['none'])}")

    # The jobs to enqueue in all: with --minutes, the clock ends the enqueueing, not a count.
    limit = args.jobs if args.minutes is None else sys.maxsize
    print(
        (f"{args.minutes:g} minutes of" if args.minutes is not None else f"{args.jobs:,}")
        + f" no-op jobs, backlog ~{args.backlog:,}, completed kept {args.retention:g}s,"
        f" reaper every {args.reaper_interval:g}s; one runjobs process"
    )
    print(
        f"{'s':>6} {'jobs/s':>8} {'rows':>9} {'table MB':>9} {'indexes MB':>10} {'events MB':>9}"
        f" {'dead':>8} {'vacuums':>7}"
    )
    log = tempfile.NamedTemporaryFile(prefix="churn_soak_worker_", suffix=".log", delete=False)  # noqa: SIM115
    print(f"the worker's log: {log.name}")
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runjobs"], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    samples: list[dict[str, Any]] = []
    enqueued = 0
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            started = last_at = time.monotonic()
            last_done = 0
            while True:
                if args.minutes is not None and time.monotonic() - started >= args.minutes * 60:
                    limit = enqueued
                active = conn.execute(_ACTIVE, {"cap": 2 * args.backlog}).fetchone()[0]  # type: ignore[index]
                if args.rate is not None:
                    due = int((time.monotonic() - started) * args.rate) - enqueued
                    if due >= 100 and enqueued < limit:  # in calls of 100 or more, on schedule
                        n = min(due, 1000, limit - enqueued)
                        enqueue_many("test.noop", [{}] * n)
                        enqueued += n
                    else:
                        time.sleep(0.01)
                elif enqueued < limit and active < args.backlog:
                    for _ in range(min(args.backlog - active, limit - enqueued) // 1000 or 1):
                        n = min(1000, limit - enqueued)
                        enqueue_many("test.noop", [{}] * n)
                        enqueued += n
                else:
                    time.sleep(0.05)
                now = time.monotonic()
                finished = enqueued >= limit and active == 0
                if now - last_at >= args.every or finished:
                    done = enqueued - conn.execute(_ACTIVE, {"cap": 2 * args.backlog}).fetchone()[0]  # type: ignore[index]
                    table, indexes, events, dead, vacuums = conn.execute(_SIZES).fetchone()  # type: ignore[misc]
                    rows = conn.execute(_ROWS).fetchone()[0]  # type: ignore[index]
                    sample = {
                        "at": now - started,
                        "rate": (done - last_done) / (now - last_at),
                        "rows": rows,
                        "table": table / 2**20,
                        "indexes": indexes / 2**20,
                        "events": events / 2**20,
                        "dead": dead,
                        "vacuums": vacuums,
                    }
                    samples.append(sample)
                    print(
                        f"{sample['at']:6.0f} {sample['rate']:8.0f} {rows:9,} {sample['table']:9.1f}"
                        f" {sample['indexes']:10.1f} {sample['events']:9.1f} {dead:8,} {vacuums:7}",
                        flush=True,
                    )
                    last_at, last_done = now, done
                    if finished:
                        break
    finally:
        worker.terminate()
        worker.wait(30)
    steady = samples[1:-1]  # the first interval warms up; the last is cut short
    if len(steady) >= 4:
        head, tail = steady[: len(steady) // 3], steady[-(len(steady) // 3) :]
        for key, label in (
            ("rate", "jobs/s"),
            ("table", "table MB"),
            ("indexes", "indexes MB"),
            ("rows", "rows"),
        ):
            first, last = statistics.median(s[key] for s in head), statistics.median(s[key] for s in tail)
            print(f"{label:>10}: first third {first:10,.1f}, last third {last:10,.1f} ({last / first:5.2f}x)")


if __name__ == "__main__":
    main()
