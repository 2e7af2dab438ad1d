"""What a new job costs PostgreSQL, by what the job table carries: its NOTIFY trigger as a
statement trigger, a row trigger or none, and its indexes with or without the console's.

    .venv/bin/python bench/insert_cost.py --rounds 7

In a scratch database (``BENCH_DATABASE_NAME``, default ``django_jobs_bench_inserts``: dropped,
re-created and migrated), copies of the job table (``LIKE … INCLUDING ALL``, with the real
table's other triggers) differ in one thing each:

* ``statement``: the job table as it is, its own triggers included: the NOTIFY one (migration
  0005) runs once per INSERT statement over a transition table of its rows, notifying once per
  queue;
* ``row``: a row trigger instead, one ``pg_notify`` per inserted pending row (PostgreSQL folds
  the identical notifications of a transaction into one, so a bulk INSERT still wakes a queue
  once);
* ``none``: no notification at all, the floor: what NOTIFY itself costs a commit;
* ``no_console``: the job table without the console's three list indexes (``django_jobs_status``,
  ``_type``, ``_queue``: what a table of live jobs apart from history would leave out);
* ``no_ready_queue``: without ``django_jobs_ready_queue``, the claim index of named queues;
* ``no_queue_counts``: without ``django_jobs_queue_counts``, the index of the dashboard's and the
  metrics view's counts per queue (migration 0023);
* ``copy``: the job table as it is, its bulk rows loaded by ``COPY … (FORMAT BINARY)`` instead of
  ``INSERT … SELECT FROM unnest``, their ids first taken from the table's sequence (COPY returns
  none, and ``enqueue_many`` returns its jobs). Its single INSERTs are the ``statement`` copy's.

Each round, per copy and on a fresh connection: 3,000 single-row INSERTs as ``enqueue()`` sends
them (prepared, autocommit: a commit each), then 20 INSERTs of 1,000 rows in one transaction as
``enqueue_many`` sends them. It prints the median CPU of the connection's backend per job
(``/proc/PID/stat``: run it on the database's host) and the wall time per single INSERT. Copies
alternate within each round, so the machine's drift weighs on each alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("BENCH_DATABASE_NAME", "django_jobs_bench_inserts")

from drain import bench_url, libpq_url, recreate_database  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SINGLES, BULKS, PER_BULK = 3000, 20, 1000

ROW = """
CREATE FUNCTION {schema}.notify_new_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= statement_timestamp() THEN
        PERFORM pg_notify('django_jobs', NEW.queue);
    ELSE
        PERFORM pg_notify('django_jobs', NEW.queue || ' '
            || round(extract(epoch FROM NEW.available_at - statement_timestamp()), 3));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER notify_inserted AFTER INSERT ON {schema}.django_jobs_job
FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION {schema}.notify_new_job();
"""
#: Each copy: its NOTIFY trigger (None: the job table's own, "": none, else the SQL of another)
#: and the indexes it goes without.
VARIANTS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "statement": (None, ()),
    "row": (ROW, ()),
    "none": ("", ()),
    "no_console": (None, ("django_jobs_status", "django_jobs_type", "django_jobs_queue")),
    "no_ready_queue": (None, ("django_jobs_ready_queue",)),
    "no_queue_counts": (None, ("django_jobs_queue_counts",)),
    "copy": (None, ()),
}

_COLUMNS = (
    "queue, type, version, payload, status, priority, available_at, attempts, max_attempts, unique_key,"
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call"
)
ONE = (
    f"INSERT INTO django_jobs_job ({_COLUMNS}) VALUES (%s, %s, %s, %s::jsonb, 'pending', %s,"
    " COALESCE(%s::timestamptz, now() + make_interval(secs => %s)), 0, %s, %s, %s, %s, %s::int, %s)"
    " RETURNING id, unique_key, available_at, created_at"
)
ONE_PARAMS = ("default", "test.noop", 1, "{}", 0, None, 0.0, 3, None, "retry", None, None, None)
MANY = (
    f"INSERT INTO django_jobs_job ({_COLUMNS}) SELECT 'default', 'test.noop', 1, p::jsonb, 'pending', 0,"
    " now(), 0, 3, NULL, 'retry', NULL, NULL, NULL FROM unnest(%b::text[]) AS p RETURNING id"
)
IDS = "SELECT nextval(pg_get_serial_sequence('django_jobs_job', 'id')) FROM generate_series(1, %s)"
COPY = (
    "COPY django_jobs_job (id, queue, type, version, payload, status, priority, available_at, attempts,"
    " max_attempts, on_lost) FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = ("int8", "text", "text", "int4", "jsonb", "text", "int2", "timestamptz", "int4", "int4", "text")


def copy_many(conn: psycopg.Connection[Any], payloads: list[str]) -> None:
    """``MANY``'s rows by COPY: the ids first (one statement), then the rows, due now. (The
    binary jsonb dumper encodes a Python value: the payload text is decoded for it.)"""
    ids = [row[0] for row in conn.execute(IDS, (len(payloads),), prepare=True)]
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    with conn.cursor().copy(COPY) as copy:
        copy.set_types(COPY_TYPES)
        for job_id, payload in zip(ids, payloads, strict=True):
            row = (job_id, "default", "test.noop", 1, json.loads(payload), "pending", 0, now, 0, 3, "retry")
            copy.write_row(row)


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def migrate(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def make_copies(url: str) -> None:
    """One schema per variant, its job table a copy of the migrated one."""
    with psycopg.connect(url, autocommit=True) as conn:
        triggers = conn.execute(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE tgrelid = 'public.django_jobs_job'::regclass AND NOT tgisinternal"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            " AND tablename = 'django_jobs_job'"
        ).fetchall()
        for schema, (trigger, left_out) in VARIANTS.items():
            conn.execute(f"CREATE SCHEMA {schema}")
            # The indexes by their definitions: LIKE … INCLUDING ALL names its copies anew.
            conn.execute(
                f"CREATE TABLE {schema}.django_jobs_job (LIKE public.django_jobs_job INCLUDING ALL"
                " EXCLUDING INDEXES)"
            )
            kept = [d for name, d in indexes if name not in left_out]
            kept += [d for name, d in triggers if name != "django_jobs_notify_inserted" or trigger is None]
            for definition in kept:
                conn.execute(
                    definition.replace(" ON public.django_jobs_job ", f" ON {schema}.django_jobs_job ")
                )
            if trigger:
                conn.execute(trigger.format(schema=schema))


def one_round(url: str, schema: str) -> tuple[float, float, float]:
    """(backend µs per single INSERT, wall µs per single INSERT, backend µs per bulk row)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}, public")
        pid = conn.info.backend_pid
        for _ in range(50):
            conn.execute(ONE, ONE_PARAMS, prepare=True).fetchall()
        cpu, wall = backend_cpu(pid), time.perf_counter()
        for _ in range(SINGLES):
            conn.execute(ONE, ONE_PARAMS, prepare=True).fetchall()
        wall, single = time.perf_counter() - wall, backend_cpu(pid) - cpu
        payloads = ["{}"] * PER_BULK
        cpu = backend_cpu(pid)
        with conn.transaction():
            for _ in range(BULKS):
                if schema == "copy":
                    copy_many(conn, payloads)
                else:
                    conn.execute(MANY, (payloads,), prepare=True).fetchall()
        bulk = backend_cpu(pid) - cpu
        conn.execute("TRUNCATE django_jobs_job")
    return 1e6 * single / SINGLES, 1e6 * wall / SINGLES, 1e6 * bulk / (BULKS * PER_BULK)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = bench_url()
    recreate_database(url)
    migrate(url)
    url = libpq_url(url)
    make_copies(url)
    runs: dict[str, list[tuple[float, float, float]]] = {schema: [] for schema in VARIANTS}
    for _ in range(args.rounds):
        for schema in VARIANTS:
            runs[schema].append(one_round(url, schema))
            print(schema, *(round(x, 1) for x in runs[schema][-1]), flush=True)
    print("copy | single INSERT: backend µs, wall µs | bulk: backend µs a row (medians)")
    for schema, rows in runs.items():
        print(schema, *(round(statistics.median(r[k] for r in rows), 1) for k in range(3)))


if __name__ == "__main__":
    main()
