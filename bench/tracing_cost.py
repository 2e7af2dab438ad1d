"""What tracing costs the hot path: ``enqueue()`` and one job run by the worker's executor.

    .venv/bin/python bench/tracing_cost.py [--jobs 200] [--reps 3]

Three ways, interleaved in one run, on the test project's ``test.noop`` jobs in a dedicated
database (``django_jobs_bench_tracing``, re-created): OpenTelemetry not installed (the face's
``AVAILABLE`` off, as an import that found nothing leaves it), installed with no tracer provider
set (the default until an application sets one), and installed with the SDK's provider and a
span processor that drops every span (what the spans themselves cost, without an exporter).
Each repetition enqueues ``--jobs`` jobs one by one (a commit each), then claims and runs them one
at a time with ``django_jobs.testing.run_one`` (claim, execute, outcome), each way in turn, the
first way rotating from one repetition to the next; medians are printed. A claim of one job is
the worst case of the traced worker's read of the claimed jobs' contexts: a worker's claims
take up to ``BATCH_SIZE`` jobs, and read them in one statement. Last, the hooks alone (an
execution's span block and a check of whether tracing is on) are timed over many calls, free
of the database's noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import timeit
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("BENCH_DATABASE_NAME", "django_jobs_bench_tracing")

from bench import drain as drain_bench  # noqa: E402  (after the path and the database name)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per repetition (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each way (default 3)")
    args = parser.parse_args()

    drain_bench.fresh_bench_database()

    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from django_jobs import enqueue
    from django_jobs.observe import tracing
    from django_jobs.testing import run_one
    from django_jobs.transitions import Claim

    def not_installed() -> None:
        tracing.AVAILABLE = False
        trace._TRACER_PROVIDER = None

    def no_provider() -> None:
        tracing.AVAILABLE = True
        trace._TRACER_PROVIDER = None

    sdk = TracerProvider()
    sdk.add_span_processor(SpanProcessor())  # the base class: every span dropped at its end

    def sdk_provider() -> None:
        tracing.AVAILABLE = True
        trace._TRACER_PROVIDER = sdk

    ways = {
        "not installed": not_installed,
        "installed, no provider": no_provider,
        "SDK, spans dropped": sdk_provider,
    }
    enqueue_us: dict[str, list[float]] = {name: [] for name in ways}
    run_us: dict[str, list[float]] = {name: [] for name in ways}
    print(f"$ {sys.executable} {' '.join(sys.argv)}")
    order = list(ways.items())
    for rep in range(args.reps):
        # Each repetition starts with another way: none always runs on the freshest table.
        for name, set_up in order[rep % len(order) :] + order[: rep % len(order)]:
            drain_bench.truncate()
            set_up()
            started = time.perf_counter()
            for _ in range(args.jobs):
                enqueue("test.noop", {})
            enqueue_us[name].append(1e6 * (time.perf_counter() - started) / args.jobs)
            started = time.perf_counter()
            for _ in range(args.jobs):
                run_one(types=["test.noop"])
            run_us[name].append(1e6 * (time.perf_counter() - started) / args.jobs)
    # The hooks alone, timed over many calls: what a job pays for them, free of the database's noise.
    claim = Claim(
        id=1, queue="default", type="test.noop", version=1, payload="{}", attempt=1, max_attempts=5,
        execution_id=uuid.uuid4(), unique_key=None, checkpoint=None, priority=0, last_error_code=None,
        on_lost="retry", counted=True, claimed_at=0.0,
    )  # fmt: skip

    def hooks() -> None:
        with tracing.execution(claim):
            pass
        tracing.enabled()  # the enqueue's and the claim's check

    hook_ns = {}
    for name, set_up in ways.items():
        set_up()
        hook_ns[name] = min(timeit.repeat(hooks, number=20_000, repeat=5)) / 20_000 * 1e9
    base_enqueue = statistics.median(enqueue_us["not installed"])
    base_run = statistics.median(run_us["not installed"])
    print(f"{args.jobs} test.noop jobs per repetition, medians of {args.reps}, microseconds per job")
    for name in ways:
        enq, ran = statistics.median(enqueue_us[name]), statistics.median(run_us[name])
        print(
            f"{name:24} enqueue {enq:7.1f} us (x{enq / base_enqueue:.3f})"
            f" | claim+run+outcome {ran:7.1f} us (x{ran / base_run:.3f})"
            f" | the hooks alone {hook_ns[name]:8.0f} ns"
        )


if __name__ == "__main__":
    main()
