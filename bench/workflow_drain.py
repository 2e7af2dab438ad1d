"""A group of N no-op members with an ``on_complete`` beside the same N as plain jobs, in one
run: ``python bench/workflow_drain.py 100000 --workers 1 2 3``.

For each worker count, alternately (plain, then group, ``--reps`` times): the backlog is
enqueued (``enqueue_many`` by 1,000, or one ``enqueue_group`` call), then drained by
``runjobs --burst`` processes as ``bench/drain.py`` drains (the not-finished count polled every
50 ms; jobs/s between the first poll that saw progress and the one that saw none left). The
group's drain ends when its callback has run: it becomes pending in the transaction of the last
member's end.

Meanwhile a sampler reads ``pg_stat_activity`` every 10 ms and counts the samples in which a
backend of the bench database waited on a lock (a row lock: ``Lock`` / ``transactionid`` or
``tuple``): the cost of members serialising on a shared row shows up there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import drain as harness  # noqa: E402

LOCK_WAITS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
    " AND pid <> pg_backend_pid()"
)


class LockSampler(threading.Thread):
    """Counts the 10 ms samples in which a backend of the database waited on a lock."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.samples, self.waiting = url, 0, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(harness.libpq_url(self.url), autocommit=True) as conn:
            while not self.stopping.is_set():
                (waiting,) = conn.execute(LOCK_WAITS, [harness.BENCH_DB]).fetchone()  # type: ignore[misc]
                self.samples += 1
                self.waiting += waiting > 0
                time.sleep(0.01)


def fill(kind: str, n: int) -> float:
    """Enqueue the backlog; returns seconds."""
    from django_jobs import Step, enqueue_group

    started = time.perf_counter()
    if kind == "plain":
        harness.enqueue_bulk(n)
    else:
        enqueue_group([Step("test.noop", {}) for _ in range(n)], on_complete=Step("test.noop", {}))
    return time.perf_counter() - started


def one(kind: str, n: int, workers: int, url: str) -> dict[str, Any]:
    harness.truncate()
    harness.sql("TRUNCATE django_jobs_workflow RESTART IDENTITY CASCADE")
    enqueued = fill(kind, n)
    harness.sql("ANALYZE")
    args = argparse.Namespace(concurrency=1, pool="thread", batch_size=None, workers=workers, metrics=False)
    sampler = LockSampler(url)
    sampler.start()
    try:
        result = harness.drain(n, args, url, others_run=kind == "group")
    finally:
        sampler.stopping.set()
        sampler.join()
    result["enqueue_jobs_per_s"] = round(n / enqueued, 1)
    result["lock_wait_share"] = round(sampler.waiting / max(1, sampler.samples), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("n", type=int, help="members of the group, and plain jobs beside it")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 3], help="runjobs processes, each a run"
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each (the median is printed)")
    args = parser.parse_args()

    url = harness.fresh_bench_database()
    print("$ " + " ".join([sys.executable, *sys.argv]))
    for workers in args.workers:
        runs: dict[str, list[dict[str, Any]]] = {"plain": [], "group": []}
        for rep in range(args.reps):
            for kind in ("plain", "group"):
                r = one(kind, args.n, workers, url)
                harness.steady_rate(r)
                runs[kind].append(r)
                print(
                    f"workers={workers} rep {rep + 1} {kind}: drain {r['jobs_per_s']} jobs/s,"
                    f" enqueue {r['enqueue_jobs_per_s']} jobs/s,"
                    f" worker CPU {r['worker_cpu_ms_per_job']} ms/job,"
                    f" lock waits in {100 * r['lock_wait_share']:.1f}% of samples",
                    flush=True,
                )
        keys = ("jobs_per_s", "enqueue_jobs_per_s", "worker_cpu_ms_per_job", "lock_wait_share")
        median = {k: {key: statistics.median(r[key] for r in v) for key in keys} for k, v in runs.items()}
        ratio = median["group"]["jobs_per_s"] / median["plain"]["jobs_per_s"]
        print(
            f"workers={workers} median of {args.reps}: plain {median['plain']['jobs_per_s']:.0f} jobs/s,"
            f" group {median['group']['jobs_per_s']:.0f} jobs/s (group/plain {ratio:.2f});"
            f" enqueue plain {median['plain']['enqueue_jobs_per_s']:.0f},"
            f" group {median['group']['enqueue_jobs_per_s']:.0f} jobs/s;"
            f" lock waits plain {100 * median['plain']['lock_wait_share']:.1f}%,"
            f" group {100 * median['group']['lock_wait_share']:.1f}% of samples",
            flush=True,
        )
    harness.truncate()


if __name__ == "__main__":
    main()
