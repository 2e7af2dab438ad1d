"""Fill and drain a backlog of no-op jobs: ``./run bench N [options]``.

What is measured, on a dedicated database ``django_jobs_bench`` (dropped and re-created, then
migrated, at every run; job tables truncated before every fill):

* enqueue, one call per job: ``--enq-n`` calls of ``enqueue("test.noop", {})``, each its own
  autocommit transaction → jobs/s;
* enqueue, bulk: ``enqueue_many("test.noop", [{}] * 1000)`` until N jobs are pending → jobs/s
  (this is the backlog; it is refilled before every repetition, then ``ANALYZE``);
* drain: ``manage.py runjobs --burst`` (``--workers`` processes) on that backlog, with the
  method of the bench-peers harness: the not-finished count is
  polled every 50 ms on its own autocommit connection; jobs/s = jobs finished between the
  first poll that saw progress and the poll that saw 0 left, divided by that time. The rate
  including start-up (spawn → 0 left) is printed too;
* claim latency percentiles and jobs per claim, from each worker's ``--stats-file``;
* worker CPU ms/job: user+system time of the worker processes (``RUSAGE_CHILDREN`` delta),
  divided by N. PostgreSQL's own CPU is not included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# BENCH_DATABASE_NAME lets two checkouts on one server bench side by side.
BENCH_DB = os.environ.get("BENCH_DATABASE_NAME", "django_jobs_bench")
# Served by the partial indexes on status='pending' and status='running' (a BitmapOr):
# `status IN (...)` is not, PostgreSQL then scans the whole table (see README.md).
REMAINING_SQL = "SELECT count(*) FROM django_jobs_job WHERE status='pending' OR status='running'"
CLAIM_KEYS = ("claim_ms_p50", "claim_ms_p95", "claim_ms_p99", "claim_ms_max")


def bench_url() -> str:
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/django_jobs")
    return urllib.parse.urlsplit(url)._replace(path=f"/{BENCH_DB}").geturl()


def libpq_url(url: str) -> str:
    """``url`` without its query: Django options such as ``?prepare_threshold=5`` ride on
    DATABASE_URL for the workers, and libpq refuses them."""
    return urllib.parse.urlsplit(url)._replace(query="").geturl()


def recreate_database(url: str) -> None:
    """A fresh database each run: its schema is what the migrations make today (an edited
    migration is not re-applied to an old one), and a second run at the same time stops here
    (database in use) instead of truncating the other's jobs."""
    import psycopg

    admin = libpq_url(urllib.parse.urlsplit(url)._replace(path="/postgres").geturl())
    with psycopg.connect(admin, autocommit=True) as conn:
        try:
            conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}"')
        except psycopg.errors.ObjectInUse:
            sys.exit(f"{BENCH_DB} is in use: another benchmark or a leftover worker is running")
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')


def fresh_bench_database() -> str:
    """Re-create the bench database, set this process up on it (the test project's settings)
    and migrate it; returns its URL."""
    url = bench_url()
    recreate_database(url)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="testproject.settings")
    os.environ.pop("DEBUG", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return url


def sql(statement: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)


def truncate() -> None:
    sql("TRUNCATE django_jobs_job, django_jobs_jobevent RESTART IDENTITY CASCADE")


def enqueue_single(n: int, job_type: str = "test.noop") -> float:
    from django_jobs import enqueue

    started = time.perf_counter()
    for _ in range(n):
        enqueue(job_type, {})
    return n / (time.perf_counter() - started)


def enqueue_bulk(n: int, job_type: str = "test.noop") -> float:
    from django_jobs import enqueue_many

    started = time.perf_counter()
    for start in range(0, n, 1000):
        enqueue_many(job_type, [{}] * min(1000, n - start))
    return n / (time.perf_counter() - started)


def poll(
    conn: Any, n: int, procs: list[subprocess.Popen[bytes]], remaining: str = REMAINING_SQL
) -> tuple[float, int, float]:
    """Count what is left every 50 ms, or at most a fifth of the time: (first poll that saw
    progress, left then, 0 left).

    ``remaining`` counts the jobs still to drain (a benchmark that keeps other rows pending
    beside them counts only its own)."""
    first: float | None = None
    left_first = n
    while True:
        asked = time.perf_counter()
        left = conn.execute(remaining).fetchone()[0]
        now = time.perf_counter()
        if first is None and left < n:
            first, left_first = now, left
        if left == 0:
            assert first is not None
            return first, left_first, now
        # In burst mode one worker may exit while another still runs its last jobs.
        if any(p.poll() for p in procs) or all(p.poll() is not None for p in procs):
            # The count may have begun before the last jobs ended (on a million rows it takes
            # seconds): count again, now that no worker is left to end any.
            left = conn.execute(remaining).fetchone()[0]
            if left == 0 and first is not None:
                return first, left_first, time.perf_counter()
            raise SystemExit(f"worker(s) exited with {left} jobs left")
        # Every 50 ms, or less often while a count is slow (a backlog of a million: a count
        # that reads for seconds, in parallel workers, takes the cores the drain is measured on).
        time.sleep(max(0.05, 4 * (now - asked)))


def drain(
    n: int,
    args: argparse.Namespace,
    url: str,
    remaining: str = REMAINING_SQL,
    others_run: bool = False,
    poll_url: str | None = None,
) -> dict[str, Any]:
    """Drain the ``n`` jobs ``remaining`` counts; with ``others_run``, the workers may also run
    some of the other jobs pending beside them (a rate-limited type's, a few a second).
    ``poll_url``: where the count is polled, when not ``url`` (which the workers use)."""
    import psycopg

    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    env.pop("DEBUG", None)
    stats_dir = Path(tempfile.mkdtemp(prefix="django_jobs_bench_"))
    cmd = [sys.executable, str(ROOT / "manage.py"), "runjobs", "--burst", "-v", "0"]
    cmd += ["--concurrency", str(args.concurrency), "--pool", args.pool]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    if args.metrics:
        cmd += ["--metrics-port", "0"]  # each worker: any free port (its counters cost is measured)
    with psycopg.connect(libpq_url(poll_url or url), autocommit=True) as conn:
        left = conn.execute(remaining).fetchone()[0]  # type: ignore[index]
        assert left == n, f"backlog has {left} jobs, expected {n}"
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        spawned = time.perf_counter()
        procs = [
            subprocess.Popen([*cmd, "--stats-file", str(stats_dir / f"w{i}.json")], cwd=ROOT, env=env)
            for i in range(args.workers)
        ]
        try:
            first, left_first, ended = poll(conn, n, procs, remaining)
        except BaseException:
            for p in procs:
                p.terminate()  # our own children, by pid
            raise
    codes = [p.wait() for p in procs]
    exited = time.perf_counter()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert not any(codes), f"workers exited with {codes}"
    stats = [json.loads((stats_dir / f"w{i}.json").read_text()) for i in range(args.workers)]
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    shutil.rmtree(stats_dir)
    executions = sum(s["executions"] for s in stats)
    expected = executions == n or (others_run and executions > n)
    assert expected, f"workers report {executions} executions, expected {n}"
    result: dict[str, Any] = {
        "jobs_per_s": round(left_first / (ended - first), 1) if ended > first else None,
        "jobs_per_s_incl_startup": round(n / (ended - spawned), 1),
        "startup_s": round(first - spawned, 3),
        "steady_s": round(ended - first, 3),
        "exit_s": round(exited - ended, 3),
        "worker_cpu_ms_per_job": round(1000 * cpu / n, 4),
        "claims_with_jobs": sum(s["claims_with_jobs"] for s in stats),
        "jobs_per_claim": round(n / max(1, sum(s["claims_with_jobs"] for s in stats)), 1),
        "workers": stats,
    }
    # Several workers: the worst of their percentiles (each file holds one worker's timings).
    for key in CLAIM_KEYS:
        result[key] = max((s[key] for s in stats if s[key] is not None), default=None)
    return result


def steady_rate(r: dict[str, Any]) -> float:
    """A drain's steady rate, for a bench that computes with it: a backlog that drained before
    the second count has none, and that is the bench's input to correct, not a figure."""
    if r["jobs_per_s"] is None:
        raise SystemExit(
            f"the backlog drained within {r['steady_s']} s of the first job starting, before a"
            " second count: too few jobs to time a steady rate; give a larger N"
        )
    return float(r["jobs_per_s"])


def describe(r: dict[str, Any]) -> str:
    claim = "/".join(str(r[k]) for k in CLAIM_KEYS)
    return (
        f"drain {r['jobs_per_s']} jobs/s (incl. start-up {r['jobs_per_s_incl_startup']})"
        f" | enqueue_many {r['enqueue_bulk_jobs_per_s']} jobs/s | claim ms p50/p95/p99/max {claim}"
        f" | {r['jobs_per_claim']} jobs/claim | worker CPU {r['worker_cpu_ms_per_job']} ms/job"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("n", type=int, help="backlog size (no-op jobs)")
    add("--concurrency", type=int, default=1, help="runjobs --concurrency (default 1)")
    add("--pool", choices=("thread", "process"), default="thread", help="runjobs --pool (default thread)")
    add("--batch-size", type=int, default=None, help="runjobs --batch-size (default: the app's)")
    add("--workers", type=int, default=1, help="runjobs processes started at once")
    add("--metrics", action="store_true", help="workers count Prometheus metrics (runjobs --metrics-port)")
    add("--reps", type=int, default=1, help="drain repetitions (the median is printed)")
    add("--enq-n", type=int, default=2000, help="one-by-one enqueue() calls measured")
    add("--json", action="store_true", help="print a JSON line of the results at the end")
    add(
        "--type", default="test.noop",
        help="the jobs' type (default test.noop; test.noop_external acts outside the database: "
        "each start also asks whether a restore hold is open)",
    )  # fmt: skip
    args = parser.parse_args()

    url = fresh_bench_database()
    from django_jobs.conf import jobs_settings

    batch_size = args.batch_size or jobs_settings.BATCH_SIZE
    where = urllib.parse.urlsplit(url)
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"database {where.hostname}:{where.port}/{BENCH_DB}, N={args.n} {args.type}, workers={args.workers},"
        f" concurrency={args.concurrency}, pool={args.pool}, batch size={batch_size}, reps={args.reps}"
    )
    truncate()
    enqueue_single(50, args.type)  # warm-up: connection, imports
    truncate()
    single = round(enqueue_single(args.enq_n, args.type), 1)
    print(f"enqueue one by one: {single} jobs/s ({args.enq_n} enqueue() calls, autocommit each)")
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        truncate()
        bulk = enqueue_bulk(args.n, args.type)
        sql("ANALYZE")
        runs.append({**drain(args.n, args, url), "enqueue_bulk_jobs_per_s": round(bulk, 1)})
        r = runs[-1]
        print(f"rep {rep + 1}: {describe(r)} | start-up {r['startup_s']} s, steady {r['steady_s']} s")
    truncate()
    summary: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r[key], int | float)]
        summary[key] = round(statistics.median(values), 4) if values else None
    print(f"median of {len(runs)}: {describe(summary)} | enqueue {single} jobs/s")
    if args.json:
        extra = {"batch_size": batch_size, "enqueue_single_jobs_per_s": single, "argv": sys.argv}
        print(json.dumps({**vars(args), **extra, "median": summary, "runs": runs}, sort_keys=True))


if __name__ == "__main__":
    main()
