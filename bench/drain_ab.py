"""Interleave ``drain.py`` between checkouts: ``python bench/drain_ab.py N PAIRS TREE...``.

Each round drains N no-op jobs once with each checkout (``TREE/bench/drain.py N --reps 1``, on
``BENCH_DATABASE_NAME``, default ``django_jobs_bench``), so that whatever else the machine runs
weighs on all of them alike. Per run it prints jobs/s, the worker's CPU ms/job (start-up
included, as drain.py reports it), the CPU ms/job of the worker's PostgreSQL backends (read
from ``/proc``: run it on the database's host, as a user who may read the postmaster's
children), and the claim p50; then the medians per checkout. Each TREE needs its ``.venv``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import psycopg

TICK = os.sysconf("SC_CLK_TCK")
BENCH_DB = os.environ.get("BENCH_DATABASE_NAME", "django_jobs_bench")
ADMIN_URL = os.environ.get("ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def run(tree: str, n: int, admin: psycopg.Connection) -> tuple[float, float, float, float]:
    env = {**os.environ, "BENCH_DATABASE_NAME": BENCH_DB, "PYTHONPATH": tree}
    argv = [f"{tree}/.venv/bin/python", "bench/drain.py", str(n), "--reps", "1", "--enq-n", "200", "--json"]
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    backends: dict[int, float] = {}
    before: set[int] | None = None  # the benchmark's own connections, open before the worker's
    activity = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
    while proc.poll() is None:
        if before is None:
            probe = subprocess.run(["pgrep", "-f", f"{tree}/manage.py runjobs"], capture_output=True)
            if probe.returncode == 0:
                before = {row[0] for row in admin.execute(activity, [BENCH_DB]).fetchall()}
        else:
            for (pid,) in admin.execute(activity, [BENCH_DB]).fetchall():
                seconds = cpu_seconds(pid)
                if pid not in before and seconds is not None:
                    backends[pid] = seconds
        time.sleep(0.03)
    assert proc.stdout is not None and proc.returncode == 0, f"drain.py exited with {proc.returncode}"
    median = json.loads(proc.stdout.read().strip().splitlines()[-1])["median"]
    pg_ms = round(1000 * sum(backends.values()) / n, 4)
    return median["jobs_per_s"], median["worker_cpu_ms_per_job"], pg_ms, median["claim_ms_p50"]


def main() -> None:
    n, pairs, trees = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    results: dict[str, list[tuple[float, float, float, float]]] = {tree: [] for tree in trees}
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        for _ in range(pairs):
            for tree in trees:
                results[tree].append(run(tree, n, admin))
                print(tree, n, *results[tree][-1], flush=True)
    print("checkout N | jobs/s | worker CPU ms/job | PostgreSQL CPU ms/job | claim p50 ms (medians)")
    for tree, runs in results.items():
        print(tree, n, *(round(statistics.median(r[k] for r in runs), 4) for k in range(4)))


if __name__ == "__main__":
    main()
