"""What a durable job's steps and sleeps cost, against plain jobs doing as many units of work.

``.venv/bin/python bench/durable_cost.py [--flows 200] [--steps 10] [--reps 3]``

On the dedicated database of ``bench/drain.py`` (``$BENCH_DATABASE_NAME``, dropped, re-created
and migrated), each scenario enqueues ``--flows`` flows of ``--steps`` units of work that do
nothing, and one ``runjobs`` worker (concurrency 1), started and idle before, runs them all; the
time is from the enqueue's commit to no job left pending, running or waiting (polled every
20 ms). Scenarios:

- ``independent``: ``flows × steps`` ``test.noop`` jobs;
- ``chained``: ``flows`` chains of ``steps`` ``test.noop`` jobs (``enqueue_chain``);
- ``durable``: ``flows`` ``test.durable_steps`` jobs of ``steps`` recorded steps each, one
  execution per job;
- ``durable_sleeping``: the same, with a sleep of 1 ms after each step but the last: an
  execution per step, each a replay of the steps before it.

Printed: the median time per scenario, and per unit of work.
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

from drain import fresh_bench_database, truncate  # noqa: E402

_LEFT = (
    "SELECT count(*) FROM django_jobs_job"
    " WHERE status = 'pending' OR status = 'running' OR status = 'waiting'"
)


def left() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_LEFT)
        return int(cursor.fetchone()[0])


def timed_run(url: str, scenario: str, flows: int, steps: int) -> float:
    """Seconds from the enqueue's commit to no job left, a worker already idle and listening."""
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_JOBS_LOG_LEVEL": "WARNING"}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runjobs", "--concurrency", "1"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(3)  # started, idle, listening
        fill(scenario, flows, steps)
        started = time.perf_counter()
        while left():
            time.sleep(0.02)
        return time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait()


def fill(scenario: str, flows: int, steps: int) -> None:
    from django_jobs import Step, enqueue_chain, enqueue_many

    if scenario == "independent":
        enqueue_many("test.noop", [{}] * (flows * steps))
    elif scenario == "chained":
        for _ in range(flows):
            enqueue_chain(*[Step("test.noop", {}) for _ in range(steps)])
    elif scenario == "durable":
        enqueue_many("test.durable_steps", [{"steps": steps}] * flows)
    elif scenario == "durable_sleeping":
        enqueue_many("test.durable_steps", [{"steps": steps, "pause": 0.001}] * flows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flows", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    url = fresh_bench_database()
    units = args.flows * args.steps
    print(f"{args.flows} flows x {args.steps} units, one worker (concurrency 1), medians of {args.reps}")
    for scenario in ("independent", "chained", "durable", "durable_sleeping"):
        times = []
        for _ in range(args.reps):
            truncate()
            times.append(timed_run(url, scenario, args.flows, args.steps))
        spent = statistics.median(times)
        print(
            f"{scenario:>17}: {spent:6.2f}s, {spent / units * 1000:.3f} ms a unit of work ({units:,} units)"
        )


if __name__ == "__main__":
    main()
