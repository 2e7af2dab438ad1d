"""Drain due jobs beside rows the worker cannot take, against the same drain alone.

``.venv/bin/python bench/drain_beside.py [--due 10000] [--later 990000] [--foreign 100000]
[--unreadable 1000000] [--unreadable-version 2] [--rate-limited 100000] [--paused 1000000]
[--sleeping 100000]
[--only SCENARIO ...]
[--reps 3] [--json]``

On the dedicated database of ``bench/drain.py`` (``$BENCH_DATABASE_NAME``, dropped, re-created
and migrated), each scenario starts from an empty job table, gets its rows from
``INSERT … SELECT generate_series`` (the columns ``enqueue_many`` writes), then ``--due``
claimable ``test.noop`` jobs are drained by ``manage.py runjobs --burst`` with the defaults
(one worker, concurrency 1), measured exactly as ``drain.py`` measures it. Scenarios:

- ``alone``: the due jobs only;
- ``beside_later_and_foreign``: besides them, ``--later`` ``test.noop`` jobs due an hour from
  now at a higher priority (first in the claim index's order, but not due), and ``--foreign``
  due jobs, older than the due ones, of a type no worker runs (``other.service``);
- ``beside_rate_limited``: besides them, ``--rate-limited`` due jobs, older than the due ones,
  of ``test.rated``, a type limited to 20 starts a second: its window is full after the first
  claims, and its jobs wait;
- ``beside_paused``: besides them, ``--paused`` due ``test.noop`` jobs, older than the due
  ones, in a queue an operator paused (``reports``): the backlog that grows during an incident;
- ``beside_sleeping_and_waiting``: besides them, ``--sleeping`` durable ``test.noop`` jobs, half
  asleep until an hour from now, half waiting for a signal that times out in two, at a higher
  priority, each with its step record: the rows ``ctx.sleep`` and ``ctx.wait_for`` leave;
- ``beside_unreadable``: besides them, ``--unreadable`` due ``test.noop`` jobs, older than the
  due ones, of a payload version newer than the worker reads. The default, 2, is the next
  version of ``test.noop`` (which reads version 1): the payloads a rolling deploy's new code
  enqueues. The test project's newest type version is 3 (``test.versioned``), so version 2
  passes the claim's ``version <= newest`` test on the index entry and is refused by the
  per-type test on the row; ``--unreadable-version 4`` or more is refused on the index entry.

What is left to drain is the due rows only (the others stay pending for ever): ``drain.py``'s
poll counts ``status='pending' OR status='running'`` within the id range of the due rows (the
primary key serves it), and the burst worker exits by itself once nothing is claimable.

Repetitions: the rows beside are inserted once per scenario; before each repetition the due
rows of the previous one (completed by then) are deleted, ``--due`` fresh ones inserted, and
the table is ``VACUUM ANALYZE``-d, so that every repetition drains the same backlog beside the
same rows, with no completed rows and no dead index entries left from the one before.

One line per scenario: the median of the repetitions' jobs/s, claim ms p50/p99 (the median of
each worker's ``--stats-file`` percentile) and the ratio to ``alone`` beside the goal, 0.83×.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from drain import BENCH_DB, drain, fresh_bench_database  # noqa: E402

GOAL = 0.83
# `g * 1 µs` keeps the rows of one fill in insertion order in the claim order.
_FILL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
    " attempts, max_attempts, unique_key, on_lost, concurrency_key, concurrency_limit, on_lost_in_call)"
    " SELECT %(queue)s, %(type)s, %(version)s, '{}'::jsonb, 'pending', %(priority)s,"
    " now() + make_interval(secs => %(offset)s) + make_interval(secs => g * 0.000001), 0, 5, NULL,"
    " 'retry', %(key)s, %(key_limit)s, NULL FROM generate_series(1, %(n)s) g"
)
# The due jobs, and the id range the poll counts.
_FILL_DUE = f"WITH made AS ({_FILL} RETURNING id) SELECT min(id), max(id), count(*) FROM made"
_DUE = {"queue": "default", "type": "test.noop", "version": 1, "priority": 0, "offset": -60.0}
# Each sleeping or waiting job's record: one step row, as ctx.sleep / ctx.wait_for leave it.
_FILL_DURABLE = (
    "INSERT INTO django_jobs_jobstep"
    " (job_id, sequence, name, kind, until, timed_out, execution_id, created_at)"
    " SELECT id, 1, CASE WHEN %(kind)s = 'sleep' THEN 'sleep#1' ELSE 'paid' END, %(kind)s, available_at,"
    " false, gen_random_uuid(), now() FROM django_jobs_job"
    " WHERE status = 'pending' AND available_at > now() + make_interval(secs => %(from)s)"
    " AND NOT EXISTS (SELECT 1 FROM django_jobs_jobstep s WHERE s.job_id = django_jobs_job.id)"
)
#: The queue an operator paused in ``beside_paused``.
PAUSED_QUEUE = "reports"


def beside(args: argparse.Namespace) -> dict[str, list[dict[str, object]]]:
    """What each scenario holds besides the due jobs."""
    return {
        "alone": [],
        "beside_later_and_foreign": [
            {"type": "test.noop", "priority": 10, "offset": 3600.0, "n": args.later},
            {"type": "other.service", "priority": 0, "offset": -3600.0, "n": args.foreign},
        ],
        "beside_unreadable": [
            {
                "type": "test.noop",
                "version": args.unreadable_version,
                "priority": 0,
                "offset": -3600.0,
                "n": args.unreadable,
            },
        ],
        "beside_rate_limited": [
            {"type": "test.rated", "priority": 0, "offset": -3600.0, "n": args.rate_limited},
        ],
        "beside_busy_key": [
            {
                "type": "test.keyed",
                "priority": 0,
                "offset": -3600.0,
                "n": args.busy_key,
                "key": "tenant-1",
                "key_limit": 2,
            },
        ],
        "beside_paused": [
            {"queue": PAUSED_QUEUE, "type": "test.noop", "priority": 0, "offset": -3600.0, "n": args.paused},
        ],
        # Durable jobs asleep or parked in a wait: pending, due at their wake time or timeout,
        # at a higher priority, each with its step record (docs/durable-jobs.md).
        "beside_sleeping_and_waiting": [
            {
                "type": "test.noop",
                "priority": 10,
                "offset": 3600.0,
                "n": args.sleeping // 2,
                "durable": "sleep",
            },
            {
                "type": "test.noop",
                "priority": 10,
                "offset": 7200.0,
                "n": args.sleeping // 2,
                "durable": "wait",
            },
        ],
    }


def execute(statement: str, params: dict[str, object] | None = None) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone() if cursor.description else None


def refill_due(n: int, previous: tuple[int, int] | None) -> tuple[int, int]:
    """Delete the due rows of the previous repetition, insert ``n`` fresh ones: their id range."""
    if previous is not None:
        lo, hi = previous
        for table in ("django_jobs_jobevent", "django_jobs_externalcall"):
            execute(f"DELETE FROM {table} WHERE job_id BETWEEN %(lo)s AND %(hi)s", {"lo": lo, "hi": hi})
        execute("DELETE FROM django_jobs_job WHERE id BETWEEN %(lo)s AND %(hi)s", {"lo": lo, "hi": hi})
    lo, hi, count = execute(_FILL_DUE, {**_DUE, "key": None, "key_limit": None, "n": n})
    assert count == n == hi - lo + 1, (lo, hi, count)
    execute("VACUUM ANALYZE django_jobs_job")
    return lo, hi


def remaining_sql(lo: int, hi: int) -> str:
    # The OR of drain.py (each status has its partial index), bounded by the primary key.
    return (
        "SELECT count(*) FROM django_jobs_job WHERE (status='pending' OR status='running')"
        f" AND id BETWEEN {int(lo)} AND {int(hi)}"
    )


def run(name: str, rows: list[dict[str, object]], args: argparse.Namespace, url: str) -> list[dict[str, Any]]:
    execute("TRUNCATE django_jobs_job, django_jobs_jobevent RESTART IDENTITY CASCADE")
    execute("DELETE FROM django_jobs_queue_state")
    for fill in rows:
        execute(_FILL, {"queue": "default", "version": 1, "key": None, "key_limit": None, **fill})
        if fill.get("durable"):
            execute(_FILL_DURABLE, {"kind": fill["durable"], "from": float(str(fill["offset"])) - 60})
        if fill.get("queue") == PAUSED_QUEUE:
            execute(
                "INSERT INTO django_jobs_queue_state (name, paused_at, paused_by, reason)"
                " VALUES (%(queue)s, now(), 'bench', 'paused while its backlog grows')",
                {"queue": PAUSED_QUEUE},
            )
    worker = argparse.Namespace(concurrency=1, pool="thread", batch_size=None, metrics=False, workers=1)
    runs: list[dict[str, Any]] = []
    due: tuple[int, int] | None = None
    for rep in range(args.reps):
        due = refill_due(args.due, due)
        r = drain(
            args.due,
            worker,
            url,
            remaining_sql(*due),
            others_run=name in ("beside_rate_limited", "beside_busy_key"),
        )
        runs.append(r)
        print(
            f"  {name} rep {rep + 1}: {r['jobs_per_s']} jobs/s, claim ms p50 {r['claim_ms_p50']}"
            f" p99 {r['claim_ms_p99']}, {r['jobs_per_claim']} jobs/claim, steady {r['steady_s']} s",
            flush=True,
        )
    return runs


def median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r[key], int | float)]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--due", type=int, default=10_000, help="due test.noop jobs drained (default 10,000)")
    add("--later", type=int, default=990_000, help="test.noop jobs due in an hour, higher priority")
    add("--foreign", type=int, default=100_000, help="due jobs of a type no worker runs")
    add("--unreadable", type=int, default=1_000_000, help="due test.noop jobs of a newer payload version")
    add("--unreadable-version", type=int, default=2, help="their version (test.noop reads 1; default 2)")
    add("--rate-limited", type=int, default=100_000, help="due jobs of a type limited to 20 starts/s")
    add("--busy-key", type=int, default=100_000, help="due jobs of one concurrency key (limit 2)")
    add("--paused", type=int, default=1_000_000, help="due test.noop jobs of a paused queue")
    add("--sleeping", type=int, default=100_000, help="durable jobs asleep (half) or waiting (half)")
    add("--only", nargs="*", help="scenarios to run (alone is always run: the ratios divide by it)")
    add("--reps", type=int, default=3, help="drains per scenario (the median is printed)")
    add("--json", action="store_true", help="print a JSON line of the results at the end")
    args = parser.parse_args()

    url = fresh_bench_database()
    from django_jobs.conf import jobs_settings

    where = urllib.parse.urlsplit(url)
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"database {where.hostname}:{where.port}/{BENCH_DB}, due={args.due}, 1 worker, concurrency 1,"
        f" batch size {jobs_settings.BATCH_SIZE}, reps={args.reps}",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    for name, rows in beside(args).items():
        if args.only and name != "alone" and name not in args.only:
            continue
        runs = run(name, rows, args, url)
        results[name] = {"rows_beside": sum(int(str(r["n"])) for r in rows), "runs": runs}
        for key in ("jobs_per_s", "claim_ms_p50", "claim_ms_p99", "jobs_per_claim"):
            results[name][key] = median(runs, key)
    alone = results["alone"]["jobs_per_s"]
    for name, r in results.items():
        r["ratio"] = round(r["jobs_per_s"] / alone, 3) if alone and r["jobs_per_s"] else None
        print(
            f"{name:>25} ({r['rows_beside']:>9,} rows beside): {r['jobs_per_s']:>8} jobs/s"
            f" | claim ms p50 {r['claim_ms_p50']} p99 {r['claim_ms_p99']}"
            f" | {r['ratio']}x alone (goal >= {GOAL}x)"
        )
    if args.json:
        summary = {**vars(args), "goal": GOAL, "argv": sys.argv, "scenarios": results}
        print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
