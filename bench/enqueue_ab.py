"""Enqueue's cost beside other checkouts, client and server apart.

    .venv/bin/python bench/enqueue_ab.py 3 /path/to/base .

Each round runs one process per checkout (``TREE/.venv/bin/python bench/enqueue_ab.py
--side``, ``PYTHONPATH=TREE``), one after the other, so whatever else the machine does weighs on
each alike. A side runs on the test project and a database of its checkout's own
(``BENCH_DATABASE_NAME``, default ``django_jobs_bench_enqueue``, then ``_1``, ``_2``… by the
checkout's place on the command line; created when missing, migrated by that checkout, so each
runs on the schema its own migrations make):

* ``single``: 1,500 ``enqueue("test.noop", {})``, each its own autocommit transaction;
* ``bulk``: 10 × ``enqueue_many`` of 1,000 jobs, with empty payloads (``{}``, the peers'
  benchmark) and with a payload of a realistic shape (an order: ids, an e-mail, two items, a
  quoted note), which is where the way the payloads travel shows.

For each it prints jobs/s, the client's CPU µs a job (``time.process_time``) and the CPU µs a
job of the connection's PostgreSQL backend (``/proc/PID/stat``: run it on the database's
host), then the medians per checkout. The job table is truncated after each side.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = os.environ.get("BENCH_DATABASE_NAME", "django_jobs_bench_enqueue")
TICK = os.sysconf("SC_CLK_TCK")
SINGLE = 1500
CALLS, PER_CALL = 10, 1000
ORDER = {
    "order_id": 123456,
    "email": "someone@example.com",
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    "note": 'gift "wrap", please',
}
FIGURES = ("single", "bulk_empty", "bulk_order")


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def side() -> dict[str, Any]:
    """One checkout's figures, in this process (the tree is on PYTHONPATH)."""
    sys.path.insert(0, os.environ["PYTHONPATH"])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from django_jobs import enqueue, enqueue_many

    call_command("migrate", verbosity=0)
    for _ in range(200):  # warm: connection, prepared statements, caches
        enqueue("test.noop", {})
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid

    def measured(jobs: int, work: Any) -> dict[str, float]:
        server, client, wall = backend_cpu(pid), time.process_time(), time.perf_counter()
        work()
        wall, client = time.perf_counter() - wall, time.process_time() - client
        server = backend_cpu(pid) - server
        return {"per_s": jobs / wall, "client_us": 1e6 * client / jobs, "backend_us": 1e6 * server / jobs}

    def singles() -> None:
        for _ in range(SINGLE):
            enqueue("test.noop", {})

    out = {"single": measured(SINGLE, singles)}
    for name, payload in (("bulk_empty", {}), ("bulk_order", ORDER)):
        batch = [dict(payload) for _ in range(PER_CALL)]
        enqueue_many("test.noop", batch)

        def bulk(batch: list[dict[str, Any]] = batch) -> None:
            for _ in range(CALLS):
                enqueue_many("test.noop", batch)

        out[name] = measured(CALLS * PER_CALL, bulk)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_jobs_job, django_jobs_jobevent RESTART IDENTITY CASCADE")
    return out


def ensure_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    rounds, trees = int(sys.argv[1]), [str(Path(t).resolve()) for t in sys.argv[2:]]
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/django_jobs").split("?")[0]
    urls = [url.rsplit("/", 1)[0] + f"/{BENCH_DB}_{place}" for place in range(1, len(trees) + 1)]
    for tree_url in urls:
        ensure_database(tree_url)
    results: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree, tree_url in zip(trees, urls, strict=True):
            env = {**os.environ, "PYTHONPATH": tree, "DATABASE_URL": tree_url}
            argv = [f"{tree}/.venv/bin/python", str(ROOT / "bench" / "enqueue_ab.py"), "--side"]
            figures = json.loads(
                subprocess.run(argv, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
            )
            results[tree].append(figures)
            print(
                tree,
                json.dumps({k: {m: round(v, 1) for m, v in f.items()} for k, f in figures.items()}),
                flush=True,
            )
    print("checkout | figure | jobs/s | client CPU µs/job | backend CPU µs/job (medians)")
    for tree, runs in results.items():
        for figure in FIGURES:
            medians = [
                statistics.median(r[figure][m] for r in runs) for m in ("per_s", "client_us", "backend_us")
            ]
            print(tree, figure, *(round(m, 1) for m in medians))


if __name__ == "__main__":
    if sys.argv[1:] == ["--side"]:
        print(json.dumps(side()))
    else:
        main()
