"""A worker's memory: ``python bench/rss.py N [--reps R]``.

For each project, on a dedicated database ``django_jobs_bench`` (re-created and migrated for
each project, job tables truncated before every run), alternating the projects in each
repetition:

* **baseline**: the RSS of the bare interpreter (``python -c ...``);
* **setup**: the RSS of a process right after ``django.setup()`` with the project's settings;
* **started**: a real ``manage.py runjobs -v 0`` (defaults, no ``--burst``) started on an empty
  table, read once it has registered itself and sat idle for a second;
* **drained**: N no-op jobs inserted at once (one INSERT ... generate_series, as the bench-peers
  harness fills its backlog) while it runs; its RSS when the last one finished, and the peak:
  the highest of its VmRSS sampled every 20 ms and of its VmHWM (the kernel's high-water mark).

Projects: ``testproject`` (this repository's test project: the admin, its demo apps,
django-health-check, Django's Tasks on django_jobs) and ``smallproject`` (bench/smallproject:
a new project's contrib apps, django_jobs, one job type). Figures in MB (2**20 bytes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drain import REMAINING_SQL, ROOT, bench_url, libpq_url, recreate_database

PROJECTS = {"testproject": "testproject.settings", "smallproject": "smallproject.settings"}
FILL_SQL = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
    " max_attempts) SELECT 'default', 'test.noop', 1, '{}'::jsonb, 'pending', 0, 0, 5"
    " FROM generate_series(1, %s)"
)
READ_RSS = "import re\nprint(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"


def env_for(settings: str, url: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": settings}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "bench")])
    env.pop("DEBUG", None)
    return env


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of process ``pid``, in MB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields


def process_mb(code: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", code + READ_RSS], env=env, cwd=ROOT, capture_output=True)
    if out.returncode:
        raise SystemExit(out.stderr.decode())
    return int(out.stdout) / 1024


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def measure(settings: str, n: int, url: str) -> dict[str, float]:
    env = env_for(settings, url)
    figures = {
        "baseline": process_mb("", env),
        "setup": process_mb("import django\ndjango.setup()\n", env),
    }
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("TRUNCATE django_jobs_job, django_jobs_jobevent RESTART IDENTITY CASCADE")
        conn.execute("DELETE FROM django_jobs_liveworker")
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runjobs", "-v", "0"], cwd=ROOT, env=env
        )
        try:
            registered = "SELECT count(*) FROM django_jobs_liveworker"
            wait_for(lambda: conn.execute(registered).fetchone()[0] > 0, 60, "the worker to register")  # type: ignore[index]
            time.sleep(1.0)
            figures["started"] = status_mb(worker.pid)["VmRSS"]
            peak = figures["started"]
            conn.execute(FILL_SQL, (n,))
            while conn.execute(REMAINING_SQL).fetchone()[0]:  # type: ignore[index]
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited with {worker.returncode}")
                peak = max(peak, status_mb(worker.pid)["VmRSS"])
                time.sleep(0.02)
            last = status_mb(worker.pid)
            figures["drained"] = last["VmRSS"]
            figures["peak"] = max(peak, last["VmRSS"], last["VmHWM"])
        finally:
            worker.terminate()  # our own child, by pid
            worker.wait(30)
    return figures


def migrate(settings: str, url: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
        cwd=ROOT,
        env=env_for(settings, url),
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("n", type=int, help="no-op jobs drained by each worker")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians printed)")
    parser.add_argument("--only", choices=sorted(PROJECTS), nargs="+", default=list(PROJECTS))
    args = parser.parse_args()
    url = bench_url()
    describe = ["git", "-C", str(ROOT), "describe", "--always", "--dirty"]
    git = subprocess.run(describe, capture_output=True, text=True)
    print(f"$ {' '.join([sys.executable, *sys.argv])}  (commit {git.stdout.strip()})")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.only}
    for rep in range(args.reps):
        for name in args.only:
            # The two projects' schemas differ (the test project's apps have tables of their own).
            recreate_database(url)
            migrate(PROJECTS[name], url)
            figures = measure(PROJECTS[name], args.n, url)
            runs[name].append(figures)
            print(f"rep {rep + 1} {name:12s} " + "  ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    print(f"medians of {args.reps}, MB, N={args.n}:")
    print("| project | baseline | after django.setup() | worker started | after the drain | peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, figures in runs.items():
        cells = [statistics.median(f[k] for f in figures) for k in figures[0]]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
