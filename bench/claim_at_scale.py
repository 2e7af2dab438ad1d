"""Claim latency on a backlog of a million jobs, against the same claim on ten thousand.

``.venv/bin/python bench/claim_at_scale.py [--big 1000000] [--claims 100]``

On the dedicated database ``django_jobs_bench`` (dropped, re-created and migrated), for each
scenario the job table is filled with one ``INSERT … SELECT generate_series`` and analysed,
then this process claims ``--claims`` batches of 100 with the worker's own claim statement
(``transitions.claim``, the statement ``runjobs`` builds for the test project's types) and
completes each batch with the worker's outcome write, as a draining worker would. Each claim
is timed from the call to its rows loaded.

Scenarios, each with 10,000 claimable ``test.noop`` jobs, and besides them (``--big`` rows in
all):

- ``reference``: nothing else (a backlog of 10,000);
- ``ready``: older claimable jobs;
- ``later``: jobs of the same type due tomorrow;
- ``foreign``: older jobs of a type no worker here knows;
- ``unreadable``: older jobs of a payload version newer than this code reads;
- ``done``: completed jobs waiting for retention.

It prints p50/p99/max per scenario and p99 as a multiple of the reference's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from drain import BENCH_DB, fresh_bench_database  # noqa: E402

CLAIMABLE = 10_000
# Columns every row gets; the scenarios vary type, version, status and available_at. Older
# rows (the backlog) come first in the claim order when they are due.
_FILL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
    " attempts, max_attempts, on_lost, created_at, finished_at, completed_at)"
    " SELECT 'default', %(type)s, %(version)s, '{}'::jsonb, %(status)s, 0,"
    " now() + make_interval(secs => %(offset)s) + make_interval(secs => g * 0.000001), 0, 5, 'retry',"
    " now(), CASE WHEN %(status)s = 'completed' THEN now() END,"
    " CASE WHEN %(status)s = 'completed' THEN now() END"
    " FROM generate_series(1, %(n)s) g"
)
#: What fills the big backlog besides the claimable jobs (nothing, for the reference).
SCENARIOS: dict[str, dict[str, object] | None] = {
    "reference": None,
    "ready": {"type": "test.noop", "version": 1, "status": "pending", "offset": -3600.0},
    "later": {"type": "test.noop", "version": 1, "status": "pending", "offset": 86_400.0},
    "foreign": {"type": "gone.type", "version": 1, "status": "pending", "offset": -3600.0},
    "unreadable": {"type": "test.noop", "version": 99, "status": "pending", "offset": -3600.0},
    "done": {"type": "test.noop", "version": 1, "status": "completed", "offset": -3600.0},
}


def run(name: str, big: int, claims: int) -> list[float]:
    from django.db import connection

    from django_jobs import transitions
    from django_jobs.runtime import connectivity
    from django_jobs.runtime.worker import Worker
    from django_jobs.transitions import Outcome

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_jobs_job, django_jobs_jobevent RESTART IDENTITY CASCADE")
        backlog = SCENARIOS[name]
        if backlog is not None:
            cursor.execute(_FILL, {**backlog, "n": big - CLAIMABLE})
        cursor.execute(
            _FILL, {"type": "test.noop", "version": 1, "status": "pending", "offset": -60.0, "n": CLAIMABLE}
        )
        cursor.execute("VACUUM ANALYZE django_jobs_job")
    statement = Worker(burst=True)._producer.statement
    timings: list[float] = []
    # On the worker's own connection settings (no JIT compilation, which on a table of a million
    # rows PostgreSQL would choose for the claim, at hundreds of milliseconds a claim).
    with connectivity.worker_statements():
        for _ in range(claims):
            started = time.perf_counter()
            claimed = transitions.claim(statement, 100)
            timings.append(time.perf_counter() - started)
            transitions.write_outcomes([Outcome(c.id, c.execution_id, "completed") for c in claimed])
            if not claimed:
                raise SystemExit(f"{name}: the claim found nothing")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--big", type=int, default=1_000_000, help="rows in the big backlogs (default 1,000,000)"
    )
    parser.add_argument("--claims", type=int, default=100, help="claims of 100 per scenario (default 100)")
    parser.add_argument(
        "--only", nargs="*", default=None, choices=list(SCENARIOS), help="scenarios to run (default: all)"
    )
    args = parser.parse_args()
    url = fresh_bench_database()
    where = urllib.parse.urlsplit(url)
    print(f"database {where.hostname}:{where.port}/{BENCH_DB}, {args.claims} claims of 100 per scenario")
    reference: float | None = None
    for name in args.only or SCENARIOS:
        ms = sorted(1000 * t for t in run(name, args.big, args.claims))
        rows = CLAIMABLE if SCENARIOS[name] is None else args.big
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
        reference = reference if reference is not None else p99
        print(
            f"{rows:>9,} rows, {name:>10}: claim ms p50 {statistics.median(ms):7.2f}"
            f"  p99 {p99:7.2f}  max {ms[-1]:7.2f}"
            f"  | p99 {p99 / reference:5.2f}x the reference"
        )


if __name__ == "__main__":
    main()
