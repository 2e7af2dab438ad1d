"""A burst of signals to durable jobs parked in a wait: how soon each job runs on.

``.venv/bin/python bench/signal_burst.py [--jobs 10000] [--workers 2] [--concurrency 4]``

On the dedicated database of ``bench/drain.py`` (``$BENCH_DATABASE_NAME``, dropped, re-created
and migrated): ``--jobs`` durable jobs (``test.durable``, one ``ctx.wait_for("paid")`` each, an
hour's timeout) are enqueued with a signal key each and parked by a burst worker. Then
``--workers`` ``runjobs`` processes start, and this process sends one signal per job, each in a
transaction of its own, as fast as it can (as webhooks would, one request each). Printed: the
burst's rate (signals/s), the time from the first signal to the last job completed, and the
latency of each job from its signal's commit to its completion (``completed_at`` minus the
signal's ``created_at``, both the database's clock): p50, p95, p99, max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from drain import fresh_bench_database  # noqa: E402

_PENDING = "SELECT count(*) FROM django_jobs_job WHERE status = 'pending' OR status = 'running'"
_LATENCIES = """
SELECT extract(epoch FROM j.completed_at - s.created_at)::float8
FROM django_jobs_job j JOIN django_jobs_jobsignal s ON s.job_id = j.id
WHERE j.status = 'completed'
"""


def count(statement: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)
        return int(cursor.fetchone()[0])


def workers(url: str, n: int, concurrency: int, *extra: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_JOBS_LOG_LEVEL": "WARNING"}
    return [
        subprocess.Popen(
            [sys.executable, "manage.py", "runjobs", "--concurrency", str(concurrency), *extra],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    url = fresh_bench_database()

    from django.db import connection, transaction

    import django_jobs
    from django_jobs import enqueue_many
    from django_jobs.transitions import durable

    script = {"script": [["wait", "paid", 3600]]}
    jobs = enqueue_many("test.durable", [{"run": f"r{n}", **script} for n in range(args.jobs)])
    with transaction.atomic():
        for job in jobs:
            durable.address(job.id, f"burst:{job.id}")
    for process in workers(url, 1, args.concurrency, "--burst"):
        process.wait()
    parked = count("SELECT count(*) FROM django_jobs_jobstep WHERE kind = 'wait' AND ended_at IS NULL")
    print(f"{parked} of {args.jobs} jobs parked in their wait", flush=True)

    running = workers(url, args.workers, args.concurrency)
    time.sleep(3)  # the workers start and go idle, listening
    started = time.perf_counter()
    for job in jobs:
        with transaction.atomic():
            django_jobs.signal(f"burst:{job.id}", "paid", {"amount": 1})
    sent = time.perf_counter() - started
    while count(_PENDING):
        time.sleep(0.05)
    done = time.perf_counter() - started
    for process in running:
        process.terminate()
        process.wait()
    with connection.cursor() as cursor:
        cursor.execute(_LATENCIES)
        latencies = sorted(row[0] for row in cursor.fetchall())
    q = statistics.quantiles(latencies, n=100)
    print(
        f"{args.jobs} signals in {sent:.2f}s ({args.jobs / sent:,.0f} signals/s, one transaction each); "
        f"the last job completed {done:.2f}s after the first signal; {args.workers} workers x "
        f"{args.concurrency} threads"
    )
    print(
        f"signal commit -> job completed: p50 {q[49] * 1000:.0f} ms, p95 {q[94] * 1000:.0f} ms, "
        f"p99 {q[98] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms ({len(latencies)} jobs)"
    )


if __name__ == "__main__":
    main()
