"""A worker that knows many job types against one that knows two:
``python bench/many_types.py [N] [--types 2 500] [--reps 3]``.

A claim probes its indexes once per kind the worker runs (docs/scaling.md, "Where the limit
is"), so a worker of a large project pays for every type it knows at every claim, whether its
queue is busy or not. This drains N no-op jobs of one type (``test.noop``) with one default
``runjobs --burst`` that knows that type and as many more no-op types as asked, each count in
turn within a repetition, on a throwaway cluster; the backlog is re-made, vacuumed and
checkpointed before each drain. It prints, per count, the median of the workers' own steady
rate (``--stats-file``: jobs over the time from the first claim to the last outcome) and the
ratio to the first count.
"""

from __future__ import annotations

import argparse
import json
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


def worker(types: int, stats: str) -> None:
    """In the worker process: keep ``test.noop``, add ``types - 1`` no-op types, drop the rest."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from django_jobs import JobContext, job
    from django_jobs.registry import registry

    for name in registry.names():
        if name != "test.noop":
            registry.unregister(name)

    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        """Never enqueued: it is here to be known."""

    for n in range(types - 1):
        job(f"bench.known_{n:04d}", external=False)(noop)
    call_command("runjobs", "--burst", "--stats-file", stats)


#: The claim statements' calls, plans (a prepared statement that PostgreSQL plans again at each
#: call, for its parameters, pays for the planning every time) and their times, in ms.
CLAIM_STATEMENTS = """
SELECT sum(calls)::int, sum(plans)::int, sum(total_exec_time), sum(total_plan_time) FROM pg_stat_statements
WHERE query LIKE '%claimed AS (UPDATE django_jobs_job j SET status%'
"""


def drain(cluster: Any, n: int, types: int, env: dict[str, str]) -> dict[str, float]:
    import psycopg

    from bench.cpu_per_job import fill_backlog

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        fill_backlog(conn, n)
        conn.execute("SELECT pg_stat_statements_reset()")
    with tempfile.TemporaryDirectory() as folder:
        stats = Path(folder) / "stats.json"
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--worker", str(types), str(stats)],
            cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        summary = json.loads(stats.read_text())
    if summary["executions"] != n:
        raise RuntimeError(f"the worker of {types} types ran {summary['executions']} jobs of {n}")
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        row = conn.execute(CLAIM_STATEMENTS).fetchone()
    assert row is not None
    calls, plans, exec_ms, plan_ms = row
    return {
        "steady": summary["jobs_per_second"],
        "rate": n / elapsed,
        "claim_p50": summary["claim_ms_p50"],
        "planned": plans / calls,
        "exec_ms": exec_ms / calls,
        "plan_ms": plan_ms / calls,
    }


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, nargs="?", default=100_000, help="jobs to drain")
    parser.add_argument("--types", type=int, nargs="+", default=[2, 500], help="job types the worker knows")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    from tests.process.throwaway_pg import ThrowawayCluster

    cluster = ThrowawayCluster(
        shared_preload_libraries="pg_stat_statements", **{"pg_stat_statements.track_planning": "on"}
    )
    cluster.create()
    try:
        env = {**os.environ, "DATABASE_URL": cluster.url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
        env.pop("DEBUG", None)
        os.environ.update(env)
        import django
        import psycopg
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        runs: dict[int, list[dict[str, float]]] = {types: [] for types in args.types}
        for _ in range(args.reps):
            for types in args.types:
                runs[types].append(drain(cluster, args.n, types, env))
        first = statistics.median(r["steady"] for r in runs[args.types[0]])
        print(f"N={args.n:,}, one runjobs --burst, defaults, medians of {args.reps}:")
        for types, results in runs.items():
            steady = statistics.median(r["steady"] for r in results)
            print(
                f"  {types:>4} types: {steady:,.0f} jobs/s steady ({steady / first:.2f}×), "
                f"{statistics.median(r['rate'] for r in results):,.0f} with start-up; claim p50 "
                f"{statistics.median(r['claim_p50'] for r in results):.2f} ms (in the server: run "
                f"{statistics.median(r['exec_ms'] for r in results):.2f} ms, planned "
                f"{statistics.median(r['plan_ms'] for r in results):.2f} ms, "
                f"{statistics.median(r['planned'] for r in results):.0%} of claims planned)"
            )
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
