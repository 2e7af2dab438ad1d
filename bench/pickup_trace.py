"""Where an idle worker's pickup time goes: ``python bench/pickup_trace.py [--samples 40]``.

One default ``runjobs`` (thread pool, ``NOTIFY`` on) waits idle on a throwaway cluster; this
script enqueues one job at a time from its own connection, at a random moment, and the worker
writes the wall-clock time of each step the job passes:

* ``committed``: ``enqueue()`` returned (its transaction committed; the NOTIFY is sent at commit);
* ``heard``: the listener thread read the notification;
* ``turned``: the main thread woke and began its claim;
* ``sent``, ``answered``: psycopg's execution of the claim statement began, and ended with the
  job (parameters sent, the server's work, its commit, the rows read);
* ``claimed``: the producer has the job as a claim, with its lease, in the pool's buffer;
* ``slot``: a slot thread took it from the pool's buffer;
* ``handler``: the handler's first line ran.

It prints the median and p90 of each step's share, in ms, so a change to the pickup path shows
where it saved or lost; and, for scale, what one round trip of a bare psycopg connection costs
on this host back to back and after the same idle pause (a process woken from idle pays for
it: on a virtual machine this is often most of a pickup). The steps are timed by wrapping the
worker's own methods in the worker process (``--trace-worker``, below), not by changing the
product. ``--one-type`` runs a worker of the traced type alone instead of the test project's 88.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = ("committed", "heard", "turned", "sent", "answered", "claimed", "slot", "handler")
#: How the claim statement begins (transitions.execution): its execution is timed apart.
CLAIM_STATEMENT_START = "WITH promoted AS"


def trace_worker(marks_path: str, one_type: bool) -> None:
    """In the worker process: wrap the steps of the pickup path, then run ``runjobs`` (of the
    traced type alone with ``one_type``, else of every type the test project declares)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django
    import psycopg

    django.setup()
    from django.core.management import call_command

    from django_jobs.runtime import pool, producer, wakeup
    from django_jobs.runtime.listener import Listener

    marks = open(marks_path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def mark(step: str) -> None:
        marks.write(f"{step} {time.time()!r}\n")

    def wrapped(owner: Any, name: str, step: str, after: bool = False) -> None:
        real = getattr(owner, name)

        def traced(*args: Any, **kwargs: Any) -> Any:
            if not after:
                mark(step)
            value = real(*args, **kwargs)
            if after and value:
                mark(step)
            return value

        setattr(owner, name, traced)

    real_execute = psycopg.Cursor.execute

    def execute(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        claim = isinstance(query, str) and query.startswith(CLAIM_STATEMENT_START)
        if claim:
            mark("sent")
        done = real_execute(cursor, query, params, **kwargs)
        if claim and cursor.rowcount > 1:  # the job's row and the counts' row
            mark("answered")
        return done

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    wrapped(Listener, "_hear", "heard")
    wrapped(wakeup.Wakeup, "claim_and_look", "turned")
    wrapped(producer.Producer, "claim_if_room", "claimed", after=True)
    wrapped(pool.ExecutorPool, "_start", "slot")

    register(lambda: mark("handler"))
    if one_type:
        from django_jobs.registry import registry

        for name in registry.names():
            if name != "bench.trace":
                registry.unregister(name)
    call_command("runjobs")


def register(first_line: Any) -> None:
    """The traced job type: its handler's first line is ``first_line()``."""
    from django_jobs import JobContext, job

    @job("bench.trace", external=False)
    def traced(ctx: JobContext, payload: dict[str, Any]) -> None:
        first_line()


def round_trips(url: str, samples: int) -> None:
    """A bare psycopg ``SELECT 1`` and a one-row ``UPDATE`` with its commit, back to back and
    after an idle pause like the pickups': the host's price of waking a process."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_round_trip (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO bench_round_trip VALUES (1, 0) ON CONFLICT DO NOTHING")
        for label, statement in (
            ("SELECT 1", "SELECT 1"),
            ("one-row UPDATE + commit", "UPDATE bench_round_trip SET n = n + 1 WHERE id = 1 RETURNING n"),
        ):
            figures = []
            for idle in (False, True):
                times = []
                for _ in range(samples):
                    if idle:
                        time.sleep(random.uniform(0.3, 1.3))
                    started = time.perf_counter()
                    conn.execute(statement).fetchall()
                    times.append((time.perf_counter() - started) * 1000)
                figures.append(statistics.median(times))
            print(f"  psycopg alone, {label}: {figures[0]:.2f} back to back, {figures[1]:.2f} after idle")


def read_marks(path: Path) -> list[tuple[str, float]]:
    lines = path.read_text().splitlines()
    return [(step, float(ts)) for step, ts in (line.split() for line in lines)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--one-type", action="store_true", help="a worker of the traced type alone")
    parser.add_argument("--trace-worker", metavar="MARKS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace_worker:
        trace_worker(args.trace_worker, args.one_type)
        return

    import tempfile

    from tests.process.throwaway_pg import ThrowawayCluster

    cluster = ThrowawayCluster()
    cluster.create()
    marks = Path(tempfile.mkstemp(suffix=".marks")[1])
    worker = None
    try:
        env = {**os.environ, "DATABASE_URL": cluster.url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
        env.pop("DEBUG", None)
        env["DJANGO_JOBS_POLL_INTERVAL"] = "1.0"  # DJANGO_JOBS's default, not the test project's
        os.environ.update(env)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django_jobs import enqueue
        from django_jobs.models import Job

        register(lambda: None)

        command = [sys.executable, __file__, "--trace-worker", str(marks)]
        worker = subprocess.Popen(
            [*command, *(["--one-type"] if args.one_type else [])],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        spans: dict[str, list[float]] = {step: [] for step in STEPS[1:]}
        totals: list[float] = []
        for sample in range(-3, args.samples):  # three to warm up
            time.sleep(random.uniform(0.3, 1.3))  # idle, at a random phase of its poll
            before = len(read_marks(marks))
            started = time.time()
            enqueue("bench.trace", {"sample": sample})
            committed = time.time()
            deadline = time.monotonic() + 15
            while not any(step == "handler" for step, _ in read_marks(marks)[before:]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sample {sample}: the handler never ran")
                time.sleep(0.005)
            if sample < 0:
                continue
            seen = {"committed": committed}
            for step, ts in read_marks(marks)[before:]:
                seen.setdefault(step, ts)  # the first of each after this enqueue
            if set(seen) != set(STEPS):
                continue  # woken otherwise (a poll): not the path traced here
            for previous, step in itertools.pairwise(STEPS):
                spans[step].append((seen[step] - seen[previous]) * 1000)
            totals.append((seen["handler"] - started) * 1000)
        print(f"{len(totals)} pickups of {args.samples}, ms (wall clock; median, p90):")
        print(f"  enqueue() call to handler: {statistics.median(totals):.2f}, {quantile(totals, 0.9):.2f}")
        for previous, step in itertools.pairwise(STEPS):
            values = spans[step]
            print(f"  {previous} → {step}: {statistics.median(values):.2f}, {quantile(values, 0.9):.2f}")
        print("one round trip, ms (median):")
        round_trips(cluster.url, min(args.samples, 20))
        print(json.dumps({"total": totals, **spans}), file=sys.stderr)
        print(f"jobs made: {Job.objects.filter(type='bench.trace').count()}", file=sys.stderr)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        marks.unlink(missing_ok=True)
        cluster.destroy()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    main()
