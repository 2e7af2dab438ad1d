"""A steady queue while one transaction holds the xmin horizon back: do waits stay flat?

``.venv/bin/python bench/held_horizon.py [--rate 500] [--workers 2] [--warmup 30] [--hold 90]
[--producers 2] [--json]``

On the dedicated database ``django_jobs_bench`` (or ``$BENCH_DATABASE_NAME``; dropped, re-created
and migrated like ``bench/drain.py``), ``--workers`` ``manage.py runjobs`` processes (the
library's defaults, not ``--burst``) serve ``--producers`` processes that together enqueue
``--rate`` no-op jobs a second, one ``enqueue("test.noop", {})`` each in its own autocommit
transaction, on a monotonic schedule (a late job does not push the later ones back; one process
alone does not reach 500 a second on two shared cores). After ``--warmup`` seconds another
connection opens ``BEGIN ISOLATION LEVEL REPEATABLE READ`` and reads a small table of its own,
and keeps that snapshot ``--hold`` seconds: no dead tuple of the job table can be removed while
it lives. Then it commits, and the run goes on for a short unpinned tail.

The wait of a job is ``started_at - created_at``, both the database's ``now()`` (a no-op job runs
once, so its last execution is its first). Compared: the last 20 s of the warm-up (unpinned)
with the last 30 s of the hold; with the share of the jobs enqueued in those 30 s that completed
before the hold ended, the pending count sampled every second, and ``n_dead_tup`` of the job
table at the end of the hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from drain import BENCH_DB, fresh_bench_database, libpq_url  # noqa: E402

PIN_TABLE = "bench_horizon_pin"  # not a job table: the snapshot must not lock what workers write
UNPINNED_WINDOW = 20.0  # the last seconds of the warm-up that are compared
HOLD_WINDOW = 30.0  # the last seconds of the hold that are compared
TAIL = 15.0
GOAL_P99_RATIO = 3.0
GOAL_COMPLETED = 0.95

_PENDING = "SELECT clock_timestamp(), count(*) FROM django_jobs_job WHERE status = 'pending'"
_ACTIVE = "SELECT count(*) FROM django_jobs_job WHERE status = 'pending' OR status = 'running'"
_DEAD = (
    "SELECT n_dead_tup, n_live_tup, autovacuum_count FROM pg_stat_user_tables"
    " WHERE relname = 'django_jobs_job'"
)
# One window of enqueue times [start, end): how many, their wait percentiles, and how many
# completed by ``by`` (the end of the hold for the hold's window).
_WINDOW = """
SELECT count(*),
       count(started_at),
       count(*) FILTER (WHERE completed_at <= %(by)s),
       count(*) FILTER (WHERE attempts > 1),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)),
       max(extract(epoch FROM started_at - created_at))
  FROM django_jobs_job
 WHERE type = 'test.noop' AND created_at >= %(start)s AND created_at < %(end)s
"""


def produce(rate: float, offset: float) -> None:
    """One producer, in its own process: ``rate`` enqueues a second (its schedule shifted by
    ``offset`` of an interval, so that several interleave) until SIGTERM, then one JSON line of
    what it did on stdout."""
    import django

    django.setup()
    from django_jobs import enqueue

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    started = time.monotonic()
    done, max_lag = 0, 0.0
    while not stopping.is_set():
        due = started + (done + offset) / rate  # the schedule, not the previous job, sets each start
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
            continue
        max_lag = max(max_lag, now - due)
        enqueue("test.noop", {})
        done += 1
    elapsed = time.monotonic() - started
    print(json.dumps({"enqueued": done, "seconds": round(elapsed, 3), "max_lag_s": round(max_lag, 3)}))


class Sampler(threading.Thread):
    """The pending count every second, on its own autocommit connection, timed by the database."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[datetime, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stopping.is_set():
                at, pending = conn.execute(_PENDING).fetchone()  # type: ignore[misc]
                self.samples.append((at, pending))
                self.stopping.wait(1.0)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def stop(procs: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM to each of our own children (by pid), then a kill for any that did not exit."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def window(conn: Any, start: datetime, end: datetime, by: datetime) -> dict[str, Any]:
    n, started, completed, retried, p50, p99, worst = conn.execute(
        _WINDOW, {"start": start, "end": end, "by": by}
    ).fetchone()
    seconds = (end - start).total_seconds()
    ms = lambda s: None if s is None else round(1000 * float(s), 1)  # noqa: E731
    return {
        "seconds": round(seconds, 1),
        "jobs": n,
        "enqueued_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "started": started,
        "completed_by_end_of_hold": completed,
        "more_than_one_attempt": retried,
        "wait_ms_p50": ms(p50),
        "wait_ms_p99": ms(p99),
        "wait_ms_max": ms(worst),
    }


def dead_tuples(conn: Any) -> dict[str, int]:
    # Our backend's own counts first; the workers' backends flush theirs at least every second.
    if conn.info.server_version >= 150000:
        conn.execute("SELECT pg_stat_force_next_flush()")
    dead, live, vacuums = conn.execute(_DEAD).fetchone()
    return {"n_dead_tup": dead, "n_live_tup": live, "autovacuum_count": vacuums}


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    import psycopg

    from django_jobs import enqueue
    from django_jobs.conf import DEFAULTS

    env = {**os.environ, "DJANGO_JOBS_POLL_INTERVAL": str(DEFAULTS["POLL_INTERVAL"])}
    log = tempfile.NamedTemporaryFile(prefix="held_horizon_workers_", suffix=".log", delete=False)  # noqa: SIM115
    print(f"the workers' log: {log.name}")
    conn = psycopg.connect(libpq_url(url), autocommit=True)
    conn.execute(f"CREATE TABLE {PIN_TABLE} (id int PRIMARY KEY)")
    conn.execute(f"INSERT INTO {PIN_TABLE} SELECT generate_series(1, 10)")
    now = lambda: conn.execute("SELECT clock_timestamp()").fetchone()[0]  # noqa: E731
    procs: list[subprocess.Popen[Any]] = []
    producers: list[subprocess.Popen[str]] = []
    sampler = Sampler(libpq_url(url))
    pin: Any = None
    marks: dict[str, datetime] = {}
    dead: dict[str, dict[str, int]] = {}
    stats_dir = tempfile.mkdtemp(prefix="held_horizon_stats_")
    try:
        cmd = [sys.executable, str(ROOT / "manage.py"), "runjobs"]
        procs += [
            subprocess.Popen(
                [*cmd, "--stats-file", os.path.join(stats_dir, f"worker{i}.json")],
                cwd=ROOT, env=env, stdout=log, stderr=log,
            )
            for i in range(args.workers)
        ]  # fmt: skip
        # The clock starts once a worker runs jobs: start-up is not part of any window.
        enqueue("test.noop", {})
        deadline = time.monotonic() + 60
        while conn.execute(_ACTIVE).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"the workers did not start; see {log.name}")
            time.sleep(0.1)
        sampler.start()
        marks["start"] = now()
        rate = args.rate / args.producers
        for i in range(args.producers):
            shifted = ["--rate", str(rate), "--offset", str(i / args.producers)]
            cmd = [sys.executable, __file__, "--produce", *shifted]
            producers.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True))
        procs += producers
        time.sleep(args.warmup)

        pin = psycopg.connect(libpq_url(url), autocommit=True)
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute(f"SELECT count(*) FROM {PIN_TABLE}")
        marks["pin"] = now()
        held = conn.execute(
            "SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s", (pin.info.backend_pid,)
        ).fetchone()[0]  # type: ignore[index]
        print(f"horizon pinned at xmin {held} after {args.warmup:g} s", flush=True)
        dead["pin"] = dead_tuples(conn)
        time.sleep(args.hold)
        dead["end_of_hold"] = dead_tuples(conn)
        marks["unpin"] = now()
        pin.execute("COMMIT")
        pin.close()
        pin = None
        print(f"horizon released after {args.hold:g} s; tail {TAIL:g} s", flush=True)
        time.sleep(TAIL)
        marks["end"] = now()
        stop(producers)
        if any(p.returncode for p in producers):
            raise SystemExit(f"a producer exited with {[p.returncode for p in producers]}")
        each = [json.loads(p.stdout.read()) for p in producers]  # type: ignore[union-attr]
        produced = {
            "enqueued": sum(e["enqueued"] for e in each),
            "seconds": max(e["seconds"] for e in each),
            "max_lag_s": max(e["max_lag_s"] for e in each),
        }
        deadline = time.monotonic() + 60
        while conn.execute(_ACTIVE).fetchone()[0] and time.monotonic() < deadline:  # type: ignore[index]
            time.sleep(0.2)
        dead["after_tail"] = dead_tuples(conn)
    except BaseException:
        conn.close()
        raise
    finally:
        sampler.stop()
        if pin is not None:
            pin.close()
        stop(procs)
    if any(p.returncode for p in procs[: args.workers]):
        print(f"worker exit codes {[p.returncode for p in procs[: args.workers]]}; see {log.name}")
    workers = []
    for i in range(args.workers):
        try:
            with open(os.path.join(stats_dir, f"worker{i}.json")) as f:
                workers.append(json.load(f))
        except OSError:
            pass
    try:
        return {**summarize(conn, args, marks, dead, produced, sampler.samples), "workers": workers}
    finally:
        conn.close()


def summarize(
    conn: Any,
    args: argparse.Namespace,
    marks: dict[str, datetime],
    dead: dict[str, dict[str, int]],
    produced: dict[str, Any],
    samples: list[tuple[datetime, int]],
) -> dict[str, Any]:
    from datetime import timedelta

    pin, unpin, end = marks["pin"], marks["unpin"], marks["end"]
    unpinned_from = max(marks["start"], pin - timedelta(seconds=UNPINNED_WINDOW))
    hold_from = max(pin, unpin - timedelta(seconds=HOLD_WINDOW))
    windows = {
        "unpinned": window(conn, unpinned_from, pin, unpin),
        "hold_last": window(conn, hold_from, unpin, unpin),
        "hold_all": window(conn, pin, unpin, unpin),
        "tail": window(conn, unpin, end, unpin),
    }
    by_phase: dict[str, list[int]] = {"unpinned": [], "hold": [], "tail": []}
    for at, pending in samples:
        phase = "unpinned" if at < pin else "hold" if at < unpin else "tail"
        if at <= end:
            by_phase[phase].append(pending)
    base, held = windows["unpinned"]["wait_ms_p99"], windows["hold_last"]["wait_ms_p99"]
    last = windows["hold_last"]
    completed = last["completed_by_end_of_hold"] / last["jobs"] if last["jobs"] else None
    return {
        "args": vars(args),
        "database": BENCH_DB,
        "producer": produced,
        "windows": windows,
        "p99_ratio": round(held / base, 2) if base and held is not None else None,
        "completed_share": round(completed, 4) if completed is not None else None,
        "pending_max": {phase: max(v, default=None) for phase, v in by_phase.items()},
        "pending_samples": [[round((at - marks["start"]).total_seconds(), 1), n] for at, n in samples],
        "dead_tuples": dead,
        "goals": {"p99_ratio_at_most": GOAL_P99_RATIO, "completed_share_at_least": GOAL_COMPLETED},
    }


def report(r: dict[str, Any]) -> None:
    w = r["windows"]
    print(f"producer: {r['producer']}")
    print(f"{'window':>10} {'s':>5} {'jobs':>7} {'jobs/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, v in w.items():
        print(
            f"{name:>10} {v['seconds']:5.0f} {v['jobs']:7} {v['enqueued_per_s']:7}"
            f" {v['wait_ms_p50']!s:>8} {v['wait_ms_p99']!s:>8} {v['wait_ms_max']!s:>8}"
        )
    print(f"pending, sampled each second: max {r['pending_max']}")
    for i, stats in enumerate(r.get("workers", [])):
        # Claims, their timings, and (where the worker counts them) its sweeps and claims from
        # where the last ones stopped, with the most dead index entries a sweep stepped over.
        keys = ("claims", "claim_ms_p50", "claim_ms_p99", "claim_sweeps", "claims_from_places")
        print(f"worker {i}: " + ", ".join(f"{k} {stats.get(k)}" for k in (*keys, "dead_entries_walked_max")))
    series = r["pending_samples"]
    print("pending every 5 s: " + " ".join(f"{at:.0f}s:{n}" for at, n in series[::5]))
    dead = r["dead_tuples"]
    print(
        "n_dead_tup of django_jobs_job: at pin {pin}, end of hold {end}, after the tail {after}".format(
            pin=dead["pin"]["n_dead_tup"],
            end=dead["end_of_hold"]["n_dead_tup"],
            after=dead.get("after_tail", {}).get("n_dead_tup"),
        )
    )
    last = w["hold_last"]
    share = r["completed_share"]
    print(
        f"p99 wait, last {last['seconds']:.0f} s of the hold / unpinned: {r['p99_ratio']}x"
        f" (goal: within {GOAL_P99_RATIO:g}x)"
    )
    print(
        f"jobs enqueued in the last {last['seconds']:.0f} s of the hold completed within it:"
        f" {last['completed_by_end_of_hold']}/{last['jobs']}"
        f" = {share if share is None else f'{100 * share:.2f} %'} (goal: >= {100 * GOAL_COMPLETED:g} %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--rate", type=float, default=500.0, help="jobs enqueued a second (default 500)")
    add("--workers", type=int, default=2, help="runjobs processes (default 2)")
    add("--warmup", type=float, default=30.0, help="seconds before the horizon is pinned (default 30)")
    add("--hold", type=float, default=90.0, help="seconds the horizon stays pinned (default 90)")
    add("--producers", type=int, default=2, help="producer processes sharing --rate (default 2)")
    add("--json", action="store_true", help="print a JSON line of the results at the end")
    add("--produce", action="store_true", help=argparse.SUPPRESS)  # a producer's own process
    add("--offset", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce:
        produce(args.rate, args.offset)
        return

    url = fresh_bench_database()
    where = urllib.parse.urlsplit(url)
    print("$ " + shlex.join([sys.executable, *sys.argv]))
    print(
        f"database {where.hostname}:{where.port}/{BENCH_DB}: {args.workers} runjobs processes,"
        f" {args.rate:g} jobs/s, warm-up {args.warmup:g} s, hold {args.hold:g} s, tail {TAIL:g} s",
        flush=True,
    )
    result = run(args, url)
    report(result)
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
