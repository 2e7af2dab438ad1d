"""Drain the same backlog directly and through PgBouncer in transaction mode: what the pooler
costs, and how many server connections the workers need.

    .venv/bin/python bench/behind_pooler.py [N] [--workers 4] [--concurrency 4] [--pool-sizes 8,20]

Two workloads, each drained by ``--workers`` ``runjobs --burst`` processes, with every
connection straight to PostgreSQL, and with docs/scaling.md's recipe: the alias through a
PgBouncer in transaction mode (one per ``--pool-sizes`` value, each with that many server
connections), declared pooled, and LISTEN on a direct connection. The runs are interleaved
and repeated (``--reps``); medians are printed.

* ``test.noop``: the worker's own statements only (claim, outcome, heartbeat);
* ``test.db_user``: a handler that holds a transaction for ``--hold`` seconds, as a handler
  writing several rows does. Each slot inside one holds a server connection for that long.

For each: jobs/s (bench/drain.py's method), and the most connections PostgreSQL served the
bench database at once (``pg_stat_activity``, sampled every 20 ms; the direct LISTEN
connections and the benchmark's own poll included). Needs Debian's
``pgbouncer`` (``apt-get install pgbouncer``). Uses its own database, ``django_jobs_bench_pooler``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("BENCH_DATABASE_NAME", "django_jobs_bench_pooler")

from bench import drain as drain_bench  # noqa: E402  (after the path and the database name)


class PeakConnections(threading.Thread):
    """The most client backends PostgreSQL had on ``database`` at once, while running."""

    def __init__(self, url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.url, self.database = url, database
        self.peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.halt.wait(0.02):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'",
                    [self.database],
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)


def fill(job_type: str, n: int, hold: float) -> None:
    from django_jobs import enqueue_many

    for start in range(0, n, 1000):
        count = min(1000, n - start)
        if job_type == "test.db_user":
            payloads: list[dict[str, Any]] = [{"n": start + i, "pause": hold} for i in range(count)]
        else:
            payloads = [{}] * count
        enqueue_many(job_type, payloads)
    drain_bench.sql("ANALYZE django_jobs_job")


def run(
    job_type: str, n: int, hold: float, url: str, direct: str, args: argparse.Namespace
) -> dict[str, Any]:
    drain_bench.truncate()
    drain_bench.sql("TRUNCATE testjobs_businessrow")
    fill(job_type, n, hold)
    peak = PeakConnections(drain_bench.libpq_url(direct), drain_bench.BENCH_DB)
    peak.start()
    try:
        result = drain_bench.drain(n, args, url, poll_url=direct)
    finally:
        peak.halt.set()
        peak.join()
    return {"jobs_per_s": drain_bench.steady_rate(result), "server_connections": peak.peak}


def run_through(
    pgbouncer: Any,
    server: tuple[int, str],
    pool_size: int | None,
    job_type: str,
    n: int,
    hold: float,
    direct: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """:func:`run` straight to PostgreSQL (``pool_size`` None) or through a PgBouncer of its own."""
    if pool_size is None:
        return run(job_type, n, hold, direct, direct, args)
    pgbouncer.POOL_SIZE = pool_size  # read when the bouncer writes its configuration
    bouncer = pgbouncer.PgBouncer(server[0], server_host=server[1]).start()
    os.environ["LISTEN_DATABASE_URL"] = drain_bench.libpq_url(direct)
    try:
        pooled = bouncer.url(drain_bench.BENCH_DB) + "?DISABLE_SERVER_SIDE_CURSORS=True"
        return run(job_type, n, hold, pooled, direct, args)
    finally:
        os.environ.pop("LISTEN_DATABASE_URL", None)
        bouncer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("n", type=int, nargs="?", default=10_000, help="test.noop jobs per drain (default 10,000)")
    add("--workers", type=int, default=4, help="runjobs processes (default 4)")
    add("--concurrency", type=int, default=4, help="runjobs --concurrency (default 4)")
    add("--pool-sizes", default="8,20", help="PgBouncer default_pool_size values to try (default 8,20)")
    add("--hold", type=float, default=0.02, help="seconds test.db_user holds its transaction")
    add("--held-n", type=int, default=2_000, help="test.db_user jobs per drain (default 2,000)")
    add("--reps", type=int, default=3, help="repetitions, interleaved; medians printed (default 3)")
    args = parser.parse_args()
    args.pool, args.batch_size, args.metrics = "thread", None, False
    pool_sizes = [int(size) for size in args.pool_sizes.split(",")]

    from tests.process import pgbouncer

    direct = drain_bench.fresh_bench_database()
    where = drain_bench.urllib.parse.urlsplit(direct)
    server = (where.port or 5432, where.hostname or "127.0.0.1")
    # None: straight to PostgreSQL; else PgBouncer's pool size. Each run starts its own bouncer
    # and stops it after, so that no pool's idle server connections count in another run.
    modes: list[int | None] = [None, *pool_sizes]
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"workers={args.workers} concurrency={args.concurrency} (PgBouncer transaction mode, LISTEN direct);"
        f" test.db_user holds {args.hold}s; medians of {args.reps}"
    )
    workloads = (("test.noop", args.n, 0.0), ("test.db_user", args.held_n, args.hold))
    found: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for _ in range(args.reps):
        for job_type, n, hold in workloads:
            for size in modes:
                found.setdefault((job_type, size), []).append(
                    run_through(pgbouncer, server, size, job_type, n, hold, direct, args)
                )
    for job_type, n, _ in workloads:
        base = statistics.median(r["jobs_per_s"] for r in found[(job_type, None)])
        for size in modes:
            runs = found[(job_type, size)]
            name = "direct" if size is None else f"PgBouncer pool {size}"
            rate = statistics.median(r["jobs_per_s"] for r in runs)
            peak = max(r["server_connections"] for r in runs)
            print(
                f"{job_type:13} N={n:<6} {name:20} {rate:>9.1f} jobs/s (x{rate / base:.2f}),"
                f" at most {peak:>3} connections to PostgreSQL"
            )


if __name__ == "__main__":
    main()
