"""CPU per drained job, worker and server together, beside PostgreSQL's own floor in the same run:
``python bench/cpu_per_job.py 10000 100000 [--processes 2] [--reps 3]``.

Everything runs on a throwaway cluster of its own (initdb in a temp dir, default settings but
``pg_stat_statements``), so the server's CPU is the cluster's alone:

* **the drain**: N no-op jobs (``enqueue_many("test.noop", …)``, then ``VACUUM ANALYZE`` and a
  checkpoint), drained by ``--processes`` default ``manage.py runjobs --burst``. Worker CPU is
  each process's rusage (``wait4``), start-up included; server CPU is the postmaster's own and
  its children's, reaped or alive (``/proc/PID/stat``: utime, stime, cutime, cstime), so the
  backends that exit with the workers are counted too. The rate is N over the workers' wall
  time, start-up included; beside it, the workers' own steady rate (``--stats-file``: jobs over
  the time from the first claim to the last outcome, summed over the processes), which no
  poller of the backlog disturbs;
* **the floor**: bench-peers' ``dblimit``, PostgreSQL doing only a queue's work: pgbench claims
  100 rows of its two-index table with ``FOR UPDATE SKIP LOCKED`` and marks them done, N / 100
  times on one client, on the same cluster; its CPU is pgbench's and the server's together;
* **the split by statement**: ``pg_stat_statements`` over the drain (execution + planning time
  in the backends, µs a job), to say where the server's share goes.

``--enqueue N`` adds ``enqueue()`` one by one beside pgbench's one-row INSERT and a bare psycopg
client; ``--bulk N`` adds ``enqueue_many()`` of 1,000 beside a bare client sending the same
INSERT, and an ``unnest()`` INSERT of as many rows into the floor's table, bare and with
django_jobs's own indexes (what the table costs a row, apart from what the library costs).

Each figure is a median of ``--reps`` runs; the ratio is the drain's CPU to the floor's in the
same run, which is what stays put when the host's speed drifts (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TICKS = os.sysconf("SC_CLK_TCK")
BATCH = 100
#: Jobs in one enqueue_many() call of --bulk, as bench-peers' bulk enqueue sends them.
BULK = 1000
FLOOR_SCHEMA = """
DROP TABLE IF EXISTS jobs;
CREATE TABLE jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'default', type text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb, status text NOT NULL DEFAULT 'pending',
    priority integer NOT NULL DEFAULT 0, available_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 3, worker_id text,
    execution_id uuid, heartbeat_at timestamptz, started_at timestamptz, finished_at timestamptz,
    last_error text, result jsonb, created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_pending_idx ON jobs (queue, priority DESC, available_at, id) WHERE status = 'pending';
CREATE INDEX jobs_running_hb_idx ON jobs (heartbeat_at) WHERE status = 'running';
"""
# The same table carrying the indexes django_jobs keeps on its own for the console, retention and
# the reaper, each on the floor's columns: every transition of a job is an UPDATE that changes
# an indexed column (its status), so none is HOT, and each adds an entry to every index whose
# predicate the new version meets (bench/README.md, "where the rest of the server's time goes").
FLOOR_PRODUCT_INDEXES = """
CREATE INDEX jobs_status_idx ON jobs (status, id DESC);
CREATE INDEX jobs_type_idx ON jobs (type, id DESC);
CREATE INDEX jobs_queue_idx ON jobs (queue, id DESC);
CREATE INDEX jobs_finished_idx ON jobs (status, finished_at) INCLUDE (type, started_at)
    WHERE finished_at IS NOT NULL;
"""
# bench-peers/dblimit/claim_template.sql with a batch of 100: a claim, then its completion.
FLOOR_SCRIPT = f"""
WITH claimed AS (
    UPDATE jobs
       SET status = 'running', attempts = attempts + 1, worker_id = 'bench-:client_id',
           execution_id = gen_random_uuid(), heartbeat_at = now(), started_at = now(), updated_at = now()
     WHERE id IN (SELECT id FROM jobs
                   WHERE status = 'pending' AND queue = 'default' AND available_at <= now()
                   ORDER BY priority DESC, available_at, id
                   FOR UPDATE SKIP LOCKED
                   LIMIT {BATCH})
 RETURNING id
)
SELECT array_agg(id) AS ids FROM claimed \\gset
UPDATE jobs
   SET status = 'succeeded', finished_at = now(), updated_at = now(), heartbeat_at = NULL
 WHERE id = ANY(':ids'::bigint[]) AND status = 'running';
"""
# bench-peers/dblimit/enqueue.sql: one job per transaction, as an app enqueues from a request.
FLOOR_ENQUEUE = """
INSERT INTO jobs (queue, type, payload, priority)
VALUES ('default', 'bench.noop', '{"args": [], "kwargs": {"client": :client_id}}', 0);
"""
STATEMENTS = """
SELECT calls, total_exec_time + total_plan_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY 2 DESC LIMIT 8
"""


def cluster_cpu(postmaster: int) -> float:
    """Seconds of CPU the cluster has spent: the postmaster's, its reaped children's, and its
    live children's."""

    def fields(pid: int) -> list[str]:
        # The command may hold spaces: the fields start after its closing parenthesis.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    own = fields(postmaster)
    total = sum(int(own[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = fields(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat[1]) == postmaster:  # ppid
            total += int(stat[11]) + int(stat[12])
    return total / TICKS


def settle() -> None:
    """Let the backends of clients that just exited end and be reaped: their CPU then shows
    in the postmaster's ``cutime`` (a backend reaped between the two reads would be missed)."""
    time.sleep(1.0)


def waited_cpu(proc: subprocess.Popen[bytes]) -> float:
    """Wait for ``proc``; the seconds of CPU it spent."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def fill_backlog(conn: Any, n: int) -> None:
    """An empty job table, then ``n`` pending ``test.noop`` jobs, vacuumed, analysed and
    checkpointed: every drain starts from the same table."""
    from django_jobs import enqueue_many

    conn.execute("TRUNCATE django_jobs_job CASCADE")
    for start in range(0, n, 1000):
        enqueue_many("test.noop", [{}] * min(1000, n - start))
    conn.execute("VACUUM ANALYZE django_jobs_job")
    conn.execute("CHECKPOINT")


def drain(cluster: Any, n: int, processes: int, env: dict[str, str]) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        fill_backlog(conn, n)
        conn.execute("SELECT pg_stat_statements_reset()")
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        server_before = cluster_cpu(postmaster)
        started = time.perf_counter()
        stats = Path(tempfile.mkdtemp(prefix="cpu-per-job-"))
        command = [sys.executable, "manage.py", "runjobs", "--burst"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        workers = [
            subprocess.Popen([*command, "--stats-file", str(stats / f"{i}.json")], cwd=ROOT, env=env, **quiet)
            for i in range(processes)
        ]
        worker_cpu = sum(waited_cpu(worker) for worker in workers)
        elapsed = time.perf_counter() - started
        # The workers' own steady rate: jobs over the time from their first claim to their last
        # outcome, start-up and exit left out (what a backlog's size may change).
        summaries = [json.loads((stats / f"{i}.json").read_text()) for i in range(processes)]
        steady = sum(summary["jobs_per_second"] or 0 for summary in summaries)
        shutil.rmtree(stats)
        settle()
        server_cpu = cluster_cpu(postmaster) - server_before
        left = conn.execute("SELECT count(*) FROM django_jobs_job WHERE status <> 'completed'").fetchone()
        if left and left[0]:
            raise RuntimeError(f"{left[0]} jobs were not completed")
        statements = conn.execute(STATEMENTS).fetchall()
    return {
        "worker": worker_cpu / n * 1e6,
        "server": server_cpu / n * 1e6,
        "rate": n / elapsed,
        "steady": steady,
        "statements": [(calls, ms * 1000 / n, query) for calls, ms, query in statements],
    }


def floor(cluster: Any, n: int, indexes: str = "") -> float:
    """CPU µs a job of PostgreSQL's own floor: pgbench's and the server's; with ``indexes``, on
    a table that carries them as well."""
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(FLOOR_SCHEMA + indexes)
        conn.execute(
            "INSERT INTO jobs (queue, type, payload) SELECT 'default', 'bench.noop', "
            "jsonb_build_object('i', g) FROM generate_series(1, %s) g",
            [n],
        )
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("CHECKPOINT")
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(FLOOR_SCRIPT)
            script.flush()
            before = cluster_cpu(postmaster)
            pgbench = subprocess.Popen(
                [str(cluster.bin / "pgbench"), "-n", "-c", "1", "-t", str(n // BATCH), "-f", script.name,
                 "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "jobs"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            client = waited_cpu(pgbench)
            settle()
            server = cluster_cpu(postmaster) - before
        done = conn.execute("SELECT count(*) FROM jobs WHERE status = 'succeeded'").fetchone()
        if not done or done[0] != n // BATCH * BATCH:
            raise RuntimeError(f"the floor finished {done} jobs of {n}")
    return (client + server) / n * 1e6


def enqueue_params() -> tuple[str, dict[str, Any]]:
    """The statement and parameters ``enqueue("test.noop", {})`` sends, as it sends them."""
    from django_jobs import enqueue
    from django_jobs.transitions import enqueue as enqueue_sql

    seen: dict[str, Any] = {}
    real = enqueue_sql.insert

    def spy(cursor: Any, shared: Any, jobs: Any) -> Any:
        payload, key, concurrency_key = jobs[0]
        seen.update(shared, payload=payload, key=key, concurrency_key=concurrency_key, concurrency_limit=None)
        return real(cursor, shared, jobs)

    enqueue_sql.insert = spy  # type: ignore[assignment]
    try:
        enqueue("test.noop", {})
    finally:
        enqueue_sql.insert = real  # type: ignore[assignment]
    return enqueue_sql.INSERT_ONE, seen


def psycopg_alone(cluster: Any, postmaster: int, n: int, statement: str, params: Any) -> tuple[float, float]:
    """``statement`` run ``n`` times by a bare psycopg connection in autocommit, prepared, the
    parameters bound by the server: what any Python client pays for it. (jobs/s, CPU µs a job)."""
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True, prepare_threshold=0) as conn:
        cursor = conn.cursor()
        for _ in range(200):
            cursor.execute(statement, params)
        elapsed, client, server = timed_calls(postmaster, n, lambda: cursor.execute(statement, params))
    return n / elapsed, (client + server) / n * 1e6


def enqueue_one_by_one(cluster: Any, n: int) -> dict[str, float]:
    """``n`` calls of ``enqueue("test.noop", {})``, each its own transaction (autocommit), beside
    the same INSERT sent by a bare psycopg connection, and beside pgbench's one-row INSERT of
    the same kind on the floor's table (and that INSERT sent by psycopg): jobs/s, and CPU µs a
    job (the client's and the server's)."""
    import psycopg

    from django_jobs import enqueue

    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("TRUNCATE django_jobs_job CASCADE")
        statement, params = enqueue_params()
        for _ in range(200):  # warm: the connection, the prepared statement, the imports
            enqueue("test.noop", {})
        conn.execute("CHECKPOINT")
        elapsed, client, server = timed_calls(postmaster, n, lambda: enqueue("test.noop", {}))
        ours_cpu = client + server
        conn.execute("CHECKPOINT")
        alone_rate, alone_cpu = psycopg_alone(cluster, postmaster, n, statement, params)
        conn.execute(FLOOR_SCHEMA)
        conn.execute("CHECKPOINT")
        floor_insert = FLOOR_ENQUEUE.replace(":client_id", "1")
        python_floor_rate, _ = psycopg_alone(cluster, postmaster, n, floor_insert, None)
        conn.execute(FLOOR_SCHEMA)
        conn.execute("CHECKPOINT")
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(FLOOR_ENQUEUE)
            script.flush()
            before = cluster_cpu(postmaster)
            started = time.perf_counter()
            pgbench = subprocess.Popen(
                [str(cluster.bin / "pgbench"), "-n", "-c", "1", "-t", str(n), "-f", script.name,
                 "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "jobs"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            client = waited_cpu(pgbench)
            floor_elapsed = time.perf_counter() - started
            settle()
            floor_cpu = client + cluster_cpu(postmaster) - before
    return {
        "rate": n / elapsed,
        "cpu": ours_cpu / n * 1e6,
        "alone_rate": alone_rate,
        "alone_cpu": alone_cpu,
        "python_floor_rate": python_floor_rate,
        "floor_rate": n / floor_elapsed,
        "floor_cpu": floor_cpu / n * 1e6,
    }


# A bulk of jobs the way a Python client at its floor sends it: one statement over arrays (as
# pgqueuer's bulk enqueue does), into the floor's table, the values of each row its own.
FLOOR_BULK = (
    "INSERT INTO jobs (queue, type, payload, priority)"
    " SELECT 'default', 'bench.noop', p::jsonb, 0 FROM unnest(%(payloads)s::text[]) AS p"
)


def bulk_params() -> tuple[str, dict[str, Any]]:
    """The statement and parameters ``enqueue_many("test.noop", [{}] * BULK)`` sends, as it sends them."""
    from django_jobs import enqueue_many
    from django_jobs.transitions import enqueue as enqueue_sql

    seen: dict[str, Any] = {}
    real = enqueue_sql.insert

    def spy(cursor: Any, shared: Any, jobs: Any) -> Any:
        seen.update(shared, payloads=[job[0] for job in jobs], keys=None, concurrency_keys=None)
        return real(cursor, shared, jobs)

    enqueue_sql.insert = spy  # type: ignore[assignment]
    try:
        enqueue_many("test.noop", [{}] * BULK)
    finally:
        enqueue_sql.insert = real  # type: ignore[assignment]
    return enqueue_sql.INSERT_MANY, seen


def timed_calls(postmaster: int, calls: int, call: Any) -> tuple[float, float, float]:
    """``call()`` ``calls`` times after a checkpoint: (seconds, client CPU s, server CPU s)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    client_before, server_before = usage.ru_utime + usage.ru_stime, cluster_cpu(postmaster)
    started = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - started
    settle()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return elapsed, usage.ru_utime + usage.ru_stime - client_before, cluster_cpu(postmaster) - server_before


def enqueue_in_bulk(cluster: Any, n: int) -> dict[str, float]:
    """``enqueue_many("test.noop", [{}] * BULK)`` until ``n`` jobs, each call its own transaction,
    beside a bare psycopg client sending the same statement, and sending a plain unnest() INSERT
    of as many rows into the floor's table, bare and with django_jobs's own indexes: jobs/s, and
    server CPU µs a job (each row's own work: what the table costs)."""
    import psycopg

    from django_jobs import enqueue_many

    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    calls = max(1, n // BULK)
    figures: dict[str, float] = {}

    def record(name: str, elapsed: float, client: float, server: float) -> None:
        figures[f"{name}_rate"] = calls * BULK / elapsed
        figures[f"{name}_client"] = client / (calls * BULK) * 1e6
        figures[f"{name}_server"] = server / (calls * BULK) * 1e6

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("TRUNCATE django_jobs_job CASCADE")
        statement, params = bulk_params()
        for _ in range(5):  # warm: the connection, the prepared statement, the imports
            enqueue_many("test.noop", [{}] * BULK)
        conn.execute("CHECKPOINT")
        record("ours", *timed_calls(postmaster, calls, lambda: enqueue_many("test.noop", [{}] * BULK)))
        with psycopg.connect(cluster.url, autocommit=True, prepare_threshold=0) as alone:
            cursor = alone.cursor()
            conn.execute("TRUNCATE django_jobs_job CASCADE")
            conn.execute("CHECKPOINT")
            record("alone", *timed_calls(postmaster, calls, lambda: cursor.execute(statement, params)))
            payloads = {"payloads": ["{}"] * BULK}
            for name, indexes in (("floor", ""), ("indexed", FLOOR_PRODUCT_INDEXES)):
                conn.execute(FLOOR_SCHEMA + indexes)
                conn.execute("CHECKPOINT")
                record(name, *timed_calls(postmaster, calls, lambda: cursor.execute(FLOOR_BULK, payloads)))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sizes", type=int, nargs="*", help="backlogs to drain (10000 unless --enqueue or --bulk)"
    )
    parser.add_argument("--processes", type=int, default=1, help="runjobs processes draining")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--enqueue", type=int, default=0, metavar="N", help="also N enqueue() calls beside pgbench's INSERT"
    )
    parser.add_argument(
        "--bulk", type=int, default=0, metavar="N",
        help=f"also N jobs by enqueue_many() of {BULK} beside a bare client's INSERT of as many",
    )  # fmt: skip
    args = parser.parse_args()
    if not args.sizes and not (args.enqueue or args.bulk):
        args.sizes = [10_000]

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
            version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {version}, a throwaway cluster; {args.processes} runjobs --burst, defaults")
        for n in args.sizes:
            runs = []
            for _ in range(args.reps):
                run = drain(cluster, n, args.processes, env)
                run["floor"] = floor(cluster, n)
                run["indexed"] = floor(cluster, n, FLOOR_PRODUCT_INDEXES)
                runs.append(run)

            def median(key: str) -> float:
                return statistics.median(r[key] for r in runs)  # noqa: B023

            worker, server = median("worker"), median("server")
            fl, indexed = median("floor"), median("indexed")
            print(
                f"N={n:,}: {median('rate'):,.0f} jobs/s ({median('steady'):,.0f} from the first claim"
                f" to the last outcome); CPU µs a job: worker {worker:.0f} + server "
                f"{server:.0f} = {worker + server:.0f}; floor {fl:.0f}; "
                f"{(worker + server) / fl:.2f}× the floor "
                f"(worker {worker / fl:.2f}×, server {server / fl:.2f}×)"
            )
            print(
                f"  the floor on a table with django_jobs's own indexes: {indexed:.0f} µs a job; "
                f"{(worker + server) / indexed:.2f}× that floor (server {server / indexed:.2f}×)"
            )
            last = runs[-1]
            print("  the server's time by statement in the last drain (calls, exec + plan µs a job):")
            for calls, per_job, query in last["statements"]:
                print(f"  {calls:>8,} {per_job:7.1f}  {query}")
        if args.enqueue:
            rows = [enqueue_one_by_one(cluster, args.enqueue) for _ in range(args.reps)]

            def middle(key: str) -> float:
                return statistics.median(r[key] for r in rows)

            rate, cpu, floor_rate = middle("rate"), middle("cpu"), middle("floor_rate")
            alone, python_floor = middle("alone_rate"), middle("python_floor_rate")
            print(
                f"enqueue() one by one, N={args.enqueue:,}: {rate:,.0f} jobs/s, {cpu:.0f} µs CPU a job; "
                f"pgbench's INSERT: {floor_rate:,.0f} jobs/s, {middle('floor_cpu'):.0f} µs; "
                f"{rate / floor_rate:.2f}× its rate"
            )
            print(
                f"  psycopg alone, enqueue()'s INSERT: {alone:,.0f} jobs/s, {middle('alone_cpu'):.0f} µs "
                f"(enqueue() is {rate / alone:.2f}× that); psycopg alone, pgbench's INSERT: "
                f"{python_floor:,.0f} jobs/s ({python_floor / floor_rate:.2f}× pgbench: Python's own price)"
            )
        if args.bulk:
            bulks = [enqueue_in_bulk(cluster, args.bulk) for _ in range(args.reps)]

            def mid(key: str) -> float:
                return statistics.median(r[key] for r in bulks)

            print(
                f"enqueue_many() of {BULK}, N={args.bulk:,}, each call its own transaction"
                " (jobs/s; CPU µs a job):"
            )
            ours = mid("ours_rate")
            for name, label in (
                ("ours", "enqueue_many()"),
                ("alone", "psycopg alone, enqueue_many()'s INSERT"),
                ("floor", "psycopg alone, an unnest() INSERT into the floor's table"),
                ("indexed", "the same, the floor's table with django_jobs's own indexes"),
            ):
                print(
                    f"  {label}: {mid(name + '_rate'):,.0f}"
                    f" ({ours / mid(name + '_rate'):.2f}× for enqueue_many()); "
                    f"client {mid(name + '_client'):.1f} + server {mid(name + '_server'):.1f}"
                )
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
