"""What an idle worker costs the database: transactions per minute, with and without LISTEN.

Starts one `manage.py runjobs` (the library's defaults: POLL_INTERVAL 1 s) on a database of its
own with nothing to do, lets it settle, and counts the transactions PostgreSQL commits in that
database over a window (`pg_stat_database.xact_commit`; every statement of a worker is its own
transaction). Then the same with `NOTIFY` off (polling only).

Run: `.venv/bin/python bench/idle.py [--seconds 60]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
DB = "django_jobs_idle_bench"
base = urllib.parse.urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/django_jobs"))
URL = base._replace(path=f"/{DB}").geturl()
ADMIN = base._replace(path="/postgres").geturl()


def commits(admin: psycopg.Connection[tuple[int]]) -> int:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [DB]).fetchone()
    assert row is not None
    return int(row[0])


def measure(notify: bool, seconds: float) -> float:
    env = {
        **os.environ,
        "DATABASE_URL": URL,
        "DJANGO_JOBS_POLL_INTERVAL": "1.0",  # the library's default (testproject sets 0.2)
        "DJANGO_JOBS_NOTIFY": "1" if notify else "0",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runjobs", "-v", "0"], cwd=ROOT, env=env, start_new_session=True
    )
    try:
        time.sleep(15)  # start-up (migration check, first reaper pass) and one stats flush
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            # Backends flush their statistics with a lag of up to 10 s when idle: the same lag
            # at both ends of a long window.
            before, started = commits(admin), time.monotonic()
            time.sleep(seconds)
            after, elapsed = commits(admin), time.monotonic() - started
        return (after - before) * 60 / elapsed
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        admin.execute(f'CREATE DATABASE "{DB}"')
    migrate = [sys.executable, "manage.py", "migrate", "-v", "0"]
    subprocess.run(migrate, cwd=ROOT, env={**os.environ, "DATABASE_URL": URL}, check=True)
    for notify in (True, False):
        per_minute = measure(notify, args.seconds)
        label = "NOTIFY on (default)" if notify else "NOTIFY off, polling every 1 s"
        print(f"idle worker, {label:32} {per_minute:6.1f} transactions per minute")


if __name__ == "__main__":
    main()
