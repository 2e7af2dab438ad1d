"""What a job costs PostgreSQL in each candidate table layout: CPU and WAL per job.

    .venv/bin/python bench/layout_cost.py 20000 --rounds 3

The layouts are copies of the job table as the migrations make it today (``LIKE … INCLUDING
ALL``, so every index, constraint and default is the real one, plus the real triggers), in
their own schemas of a scratch database:

* ``one-table``: the job table as it is, queue, history and the console's index in one;
* ``hot+history``: live jobs in a table with only the indexes the claim, the reaper and the
  keys need; a finished job is deleted from it and inserted, finished, into a history table
  partitioned by ``finished_at`` that carries the console's list indexes;
* ``settled-index``: one table, but the console's status, type and queue indexes hold finished
  jobs only, and one small index lists live jobs by status.

Each round fills N jobs (``INSERT … SELECT FROM unnest``, 1,000 a statement, as
``enqueue_many``), then claims 100 at a time (an ``UPDATE … WHERE id = ANY(ARRAY(SELECT …
FOR UPDATE SKIP LOCKED LIMIT 100))`` down the ready index, its own transaction) and completes
each batch (its own transaction) until the table is empty. It is one connection doing the
statements one after the other, so what is measured is the server: the CPU time of that
connection's backend process (``/proc/PID/stat``, so PostgreSQL must run on this host) and the
WAL it wrote, per job. Layouts alternate within each round; medians are printed.

The statements are the smallest that do a job's writes, not the product's (those add the
claim's per-kind probes and conditions, the events, the keys): what differs between layouts is
the index and heap work, and that is what this isolates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from drain import bench_url, libpq_url, recreate_database  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")

#: The console's reads and retention: in ``hot+history`` these live on the history table only.
HISTORY_INDEXES = (
    "django_jobs_status",
    "django_jobs_type",
    "django_jobs_queue",
    "django_jobs_error_code",
    "django_jobs_finished",
    "django_jobs_problems",
    "django_jobs_unique_key",
)
TRIGGERS = ("django_jobs_keep_ready", "django_jobs_notify_inserted", "django_jobs_notify_pending",
            "django_jobs_notify_key_released")  # fmt: skip

INSERT = (
    "INSERT INTO {table}"
    " (queue, type, version, payload, status, priority, available_at, attempts, max_attempts)"
    " SELECT 'default', 'test.noop', 1, p::jsonb, 'pending', 0, now(), 0, 5 FROM unnest(%s::text[]) AS p"
)
CLAIM = (
    "UPDATE {table} SET status = 'running', worker_id = 'w', execution_id = gen_random_uuid(),"
    " attempts = attempts + 1, started_at = now(), heartbeat_at = now(),"
    " lease_expires_at = now() + interval '60 s'"
    " WHERE id = ANY(ARRAY(SELECT id FROM {table} WHERE status = 'pending' AND ready"
    " AND type = 'test.noop' AND version = 1 AND available_at <= now()"
    " ORDER BY priority DESC, available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED))"
    " RETURNING id, execution_id, payload"
)
OUTCOMES = "WITH o AS (SELECT * FROM unnest(%s::bigint[], %s::uuid[]) AS o(id, execution_id))"
COMPLETE_IN_PLACE = (
    OUTCOMES + " UPDATE {table} j SET status = 'completed', completed_at = now(), finished_at = now(),"
    " lease_expires_at = NULL FROM o"
    " WHERE j.id = o.id AND j.execution_id = o.execution_id AND j.status = 'running'"
)


def _complete_moving(columns: list[str]) -> str:
    finished = {
        "status": "'completed'",
        "lease_expires_at": "NULL",
        "completed_at": "now()",
        "finished_at": "now()",
    }
    chosen = ", ".join(finished.get(column, column) for column in columns)
    return (
        OUTCOMES + ", done AS (DELETE FROM hot.django_jobs_job j USING o"
        " WHERE j.id = o.id AND j.execution_id = o.execution_id AND j.status = 'running' RETURNING j.*)"
        f" INSERT INTO hot.history ({', '.join(columns)}) SELECT {chosen} FROM done"
    )


def _copy_of_job_table(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TABLE {schema}.django_jobs_job (LIKE public.django_jobs_job INCLUDING ALL)")
    for trigger in TRIGGERS:
        definition = conn.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE tgname = %s AND tgrelid = 'public.django_jobs_job'::regclass",
            [trigger],
        ).fetchone()
        assert definition, f"trigger {trigger} not found: is the database migrated?"
        conn.execute(definition[0].replace("ON public.django_jobs_job", f"ON {schema}.django_jobs_job"))


def _index_of(conn: psycopg.Connection[Any], schema: str, name: str) -> str:
    """The copy's name of one of the job table's indexes (LIKE names them after their columns)."""
    definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [f"public.{name}"]).fetchone()[0]  # type: ignore[index]
    for copy_name, copy_definition in conn.execute(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = %s::regclass",
        [f"{schema}.django_jobs_job"],
    ).fetchall():
        if copy_definition.split(" USING ", 1)[1] == definition.split(" USING ", 1)[1]:
            return str(copy_name)
    raise LookupError(name)


def migrated_scratch_database() -> str:
    """The benchmarks' database (``bench/drain.py``'s, dropped and re-created), migrated: its URL."""
    url = bench_url()
    recreate_database(url)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], env=env, check=True)
    return libpq_url(url)


def reset(conn: psycopg.Connection[Any]) -> None:
    for schema in ("one", "hot", "settled"):
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    _copy_of_job_table(conn, "one")
    _copy_of_job_table(conn, "hot")
    for name in HISTORY_INDEXES:
        conn.execute(f"DROP INDEX {_index_of(conn, 'hot', name)}")
    conn.execute(
        "CREATE TABLE hot.history (LIKE public.django_jobs_job INCLUDING DEFAULTS)"
        " PARTITION BY RANGE (finished_at)"
    )
    conn.execute("CREATE TABLE hot.history_current PARTITION OF hot.history DEFAULT")
    conn.execute("CREATE INDEX ON hot.history (id)")
    for name in HISTORY_INDEXES:
        definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [f"public.{name}"]).fetchone()[0]  # type: ignore[index]
        conn.execute(definition.replace(f"INDEX {name} ON public.django_jobs_job", "INDEX ON hot.history"))
    _copy_of_job_table(conn, "settled")
    for name in ("django_jobs_status", "django_jobs_type", "django_jobs_queue"):
        definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [f"public.{name}"]).fetchone()[0]  # type: ignore[index]
        conn.execute(f"DROP INDEX {_index_of(conn, 'settled', name)}")
        settled = definition.replace(f"INDEX {name} ON public.", "INDEX ON settled.")
        conn.execute(settled + " WHERE finished_at IS NOT NULL")
    conn.execute("CREATE INDEX ON settled.django_jobs_job (status, id DESC) WHERE finished_at IS NULL")


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(url: str, layout: str, n: int) -> dict[str, float]:
    table = {"one-table": "one.django_jobs_job", "hot+history": "hot.django_jobs_job"}.get(
        layout, "settled.django_jobs_job"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'public.django_jobs_job'::regclass"
                " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            )
        ]
    complete = _complete_moving(columns) if layout == "hot+history" else COMPLETE_IN_PLACE.format(table=table)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]

        def wal() -> float:
            return float(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])  # type: ignore[index]

        def timed(step: Callable[[], Any]) -> tuple[float, Any]:
            before = backend_cpu(pid)
            result = step()
            return backend_cpu(pid) - before, result

        wal_0 = wal()
        enqueue_cpu = 0.0
        for _ in range(0, n, 1000):
            enqueue_cpu += timed(lambda: conn.execute(INSERT.format(table=table), [["{}"] * 1000]))[0]
        wal_1 = wal()
        conn.execute(f"ANALYZE {table}")
        claim_cpu = complete_cpu = 0.0
        done = 0
        started = time.perf_counter()
        while True:
            spent, rows = timed(lambda: conn.execute(CLAIM.format(table=table)).fetchall())
            claim_cpu += spent
            if not rows:
                break
            ids, executions = [row[0] for row in rows], [row[1] for row in rows]
            complete_cpu += timed(lambda: conn.execute(complete, [ids, executions]))[0]  # noqa: B023
            done += len(rows)
        elapsed = time.perf_counter() - started
        assert done == n, f"{layout}: drained {done} of {n}"
        return {
            "enqueue_us": enqueue_cpu / n * 1e6,
            "claim_us": claim_cpu / n * 1e6,
            "complete_us": complete_cpu / n * 1e6,
            "drain_us": (claim_cpu + complete_cpu) / n * 1e6,
            "drain_jobs_s": n / elapsed,
            "enqueue_wal_bytes": (wal_1 - wal_0) / n,
            "drain_wal_bytes": (wal() - wal_1) / n,
        }


LAYOUTS = ("one-table", "hot+history", "settled-index")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, nargs="?", default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    url = migrated_scratch_database()
    runs: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(args.rounds):
        for layout in LAYOUTS if round_ % 2 == 0 else reversed(LAYOUTS):
            runs[layout].append(measure(url, layout, args.n))
            if not args.json:
                print(round_ + 1, layout, {k: round(v, 1) for k, v in runs[layout][-1].items()}, flush=True)
    medians = {
        layout: {key: statistics.median(run[key] for run in layout_runs) for key in layout_runs[0]}
        for layout, layout_runs in runs.items()
    }
    if args.json:
        print(json.dumps({"n": args.n, "runs": runs, "medians": medians}))
        return
    keys = list(medians["one-table"])
    print(f"\nmedians of {args.rounds}, N={args.n} (CPU: the backend's, µs a job; WAL: bytes a job)")
    print(f"{'':16}" + "".join(f"{key:>18}" for key in keys))
    for layout in LAYOUTS:
        print(f"{layout:16}" + "".join(f"{medians[layout][key]:>18.1f}" for key in keys))


if __name__ == "__main__":
    main()
