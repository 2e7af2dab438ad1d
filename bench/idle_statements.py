"""What an idle worker sends to the database: statements per minute, by thread.

Runs one worker (the library's defaults: POLL_INTERVAL 1 s, NOTIFY on, the reaper on) on a
thread of this process, with no job to do, and counts the statements each of its threads sends
over a window. Unlike ``bench/idle.py``'s count of committed transactions, nothing else that
commits in the database (autovacuum, another client) can blur it.

Run: ``DATABASE_URL=... .venv/bin/python bench/idle_statements.py [--seconds 60]`` on a
migrated database whose jobs it may delete.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DJANGO_JOBS_POLL_INTERVAL"] = "1.0"  # the library's default (testproject sets 0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()

    import django

    django.setup()
    import psycopg
    from django.db import connection

    from django_jobs.runtime.worker import Worker

    counts: collections.Counter[str] = collections.Counter()
    execute = psycopg.Cursor.execute

    def counted(self: psycopg.Cursor[Any], *a: Any, **kw: Any) -> Any:
        counts[threading.current_thread().name.split(".")[0]] += 1  # executor-0.1 → executor-0
        return execute(self, *a, **kw)

    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_jobs_job")
    worker = Worker(reap=True)
    thread = threading.Thread(target=worker.run, name="main")
    thread.start()
    time.sleep(10)  # start-up: the first claim, reaper pass and report
    counts.clear()
    time.sleep(args.seconds)
    window = dict(counts)
    worker.stop()
    thread.join(30)
    for name, count in sorted(window.items()):
        print(f"{name:28} {count * 60 / args.seconds:6.1f} statements per minute")
    print(f"{'total':28} {sum(window.values()) * 60 / args.seconds:6.1f} statements per minute")


if __name__ == "__main__":
    main()
