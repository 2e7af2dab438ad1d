"""How long each of django_jobs's migrations takes on a live job table of a million jobs, and what
it does to the previous release's workers meanwhile.

``.venv/bin/python bench/migration_times.py [--rows 1000000] [--backwards]``

On the dedicated database ``django_jobs_bench`` (``BENCH_DATABASE_NAME`` names another; dropped
and re-created), migrated to 0001, it writes ``--rows`` jobs in one statement, spread over every
status (pending due and scheduled for later, running, completed, failed, skipped, cancelled,
needs review; some with unique keys), then applies each migration in turn
(``tests/process/live_migrations.py``: what ``migrate django_jobs 00NN`` runs) while two old
workers insert, claim ``FOR UPDATE SKIP LOCKED``, heartbeat and complete jobs on their own
connections. With ``--backwards`` it then unapplies them one at a time, down to 0001.

It prints, per migration: its seconds, the locks it was seen holding on the job table (sampled
every 2 ms), the longest statement of the old workers while it ran (how long it blocked them),
and whether the table was rewritten (its relfilenode changed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from drain import BENCH_DB, bench_url, libpq_url, recreate_database  # noqa: E402

ABBREVIATIONS = {
    "AccessExclusiveLock": "ACCESS EXCLUSIVE",
    "ExclusiveLock": "EXCLUSIVE",
    "ShareRowExclusiveLock": "SHARE ROW EXCLUSIVE",
    "ShareLock": "SHARE",
    "ShareUpdateExclusiveLock": "SHARE UPDATE EXCLUSIVE",
    "RowExclusiveLock": "ROW EXCLUSIVE",
    "RowShareLock": "ROW SHARE",
    "AccessShareLock": "ACCESS SHARE",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backwards", action="store_true")
    args = parser.parse_args()

    url = bench_url()
    recreate_database(url)
    command = [
        sys.executable,
        "-m",
        "tests.process.live_migrations",
        libpq_url(url),
        "--rows",
        str(args.rows),
    ]
    if args.backwards:
        command.append("--backwards")
    began = time.monotonic()
    print(f"{args.rows:,} jobs on {BENCH_DB}; the old workers run throughout\n")
    print(
        f"{'migration':<52} {'seconds':>8} {'old workers blocked':>20}  rewrite  locks seen on the job table"
    )
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as driver:
        assert driver.stdout is not None
        for line in driver.stdout:
            step = json.loads(line)
            locks = ", ".join(ABBREVIATIONS.get(mode, mode) for mode in step["locks"]) or "-"
            rewrite = "yes" if step["relfilenode"][0] != step["relfilenode"][1] else "no"
            arrow = "" if step["direction"] == "forwards" else "undo "
            name, blocked = arrow + step["migration"], step["old_longest_statement"]
            print(
                f"{name:<52} {step['seconds']:>8.2f} {blocked:>19.2f}s  {rewrite:<7}  {locks}",
                flush=True,
            )
            if step["error"] or step["old_errors"] or step["invalid_indexes"]:
                print(f"    error: {step['error']}; old workers: {step['old_errors']}")
                print(f"    invalid indexes: {step['invalid_indexes']}")
    print(f"\n{time.monotonic() - began:.0f} s in all, the filling included")
    sys.exit(driver.returncode)


if __name__ == "__main__":
    main()
