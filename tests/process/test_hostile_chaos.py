"""Hostile chaos: handlers that hang, raise BaseException, report NUL-laden and huge errors,
odd codes and infinite Retry-After, async handlers and handlers writing UNIQUE business rows
through ctx.effect — drained by three workers (one with a process pool, two with threads), one
SIGKILLed at random every ~2 s.

At the end no worker died but by SIGKILL, nothing is running, every job is in the state its
handler explains, and every business row exists once.
"""

from __future__ import annotations

import datetime as dt
import random
import signal
import time
from collections import Counter

import pytest
from django.db.models import Q
from django.db.models.functions import Now

from django_jobs import enqueue_many
from django_jobs.models import Job
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKERS = 3
CHAOS_SECONDS = 30
KILL_EVERY = 2.0
HOSTILE_KINDS = (
    "nul", "long_code", "object_code", "int_code", "inf_retry", "nan_retry", "huge_retry",
    "huge_error", "system_exit", "keyboard_interrupt", "cancelled_error", "unprintable",
)  # fmt: skip
#: Where each kind of job must end, whatever the kills: (type, kind) → allowed statuses.
EXPECTED = {
    "test.effect_row": {JobStatus.COMPLETED},
    "test.chaos": {JobStatus.COMPLETED},
    "test.async": {JobStatus.COMPLETED},
    # Past its deadline every time: its lease is no longer extended, the reaper takes it back
    # and, after its second attempt, fails it; unless an execution ended before any reaper
    # came by, and completed it (its lease was still its own).
    "test.hung": {JobStatus.FAILED, JobStatus.COMPLETED},
    "inf_retry": {JobStatus.PENDING},  # due in a year
    "huge_retry": {JobStatus.PENDING},
    "int_code": {JobStatus.FAILED},  # a PermanentError
}  # every other hostile kind is retried until its 3 attempts are used: failed


def enqueue_mix() -> int:
    enqueue_many("test.effect_row", [{"n": n, "pause": 0.01} for n in range(900)])
    enqueue_many("test.chaos", [{"n": n, "pause": 0.2} for n in range(200)])
    enqueue_many("test.async", [{} for _ in range(150)])
    enqueue_many("test.hung", [{"seconds": 3.0} for _ in range(26)])
    for kind in HOSTILE_KINDS:
        enqueue_many("test.hostile", [{"kind": kind} for _ in range(19)])
    return 900 + 200 + 150 + 26 + 19 * len(HOSTILE_KINDS)


def worker_args(i: int) -> list[str]:
    """The first worker runs its handlers in child processes, the others on threads."""
    return ["--concurrency", "4", *(["--pool", "process"] if i == 0 else [])]


def expected_statuses(job: Job) -> set[str]:
    key = job.payload.get("kind", job.type) if job.type == "test.hostile" else job.type
    return EXPECTED.get(key, {JobStatus.FAILED})


def test_hostile_handlers_and_sigkills_leave_every_job_explained(
    worker_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    total = enqueue_mix()
    assert total >= 1500
    rng = random.Random(20261130)
    workers = [WorkerProcess(worker_env, *worker_args(i)) for i in range(WORKERS)]
    killed = 0
    try:
        chaos_ends = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < chaos_ends:
            time.sleep(KILL_EVERY * rng.uniform(0.5, 1.5))
            died = [w.output()[-2000:] for w in workers if w.process.poll() is not None]
            assert not died, f"a worker died by itself:\n{died[0]}"
            victim = rng.randrange(WORKERS)
            workers[victim].kill()
            workers[victim].stop()
            workers[victim] = WorkerProcess(worker_env, *worker_args(victim))
            killed += 1

        unsettled = Job.objects.filter(
            Q(status=JobStatus.RUNNING)
            | Q(status=JobStatus.PENDING, available_at__lt=Now() + dt.timedelta(days=1))
        )
        wait_for(lambda: not unsettled.exists(), timeout=120, what="every job to settle")
        # A worker restarted a moment ago may still be starting: SIGTERM would find no handler.
        wait_for(lambda: all("worker started" in w.output() for w in workers), what="every worker to be up")
        for worker in workers:
            worker.send(signal.SIGTERM)
        assert [w.wait(timeout=30) for w in workers] == [0] * WORKERS
    finally:
        for worker in workers:
            worker.stop()

    # The test project's schedules also run in these workers; their ticks may fall in the run.
    jobs = list(Job.objects.exclude(type__startswith="demo."))
    assert len(jobs) == total
    unexplained = [
        (
            j.id,
            j.type,
            j.payload,
            j.status,
            j.attempts,
            j.last_error_code,
            list(j.events.values_list("kind", "error_code")),
        )
        for j in jobs
        if j.status not in expected_statuses(j)
    ]
    for row in unexplained[:5]:
        print("unexplained:", row)  # the whole history of what went wrong, for the log
    assert not unexplained, unexplained[:5]
    # Async rows are keyed by attempt, and hung jobs mark each start: the others are business.
    keys = [
        k
        for k in BusinessRow.objects.values_list("key", flat=True)
        if not k.startswith(("async:", "started:"))
    ]
    assert len(keys) == len(set(keys)) == 900 + 200  # every business row exactly once
    counts = Counter(j.status for j in jobs)
    with capsys.disabled():  # the report goes to the terminal, also when output is captured
        print(
            f"\nhostile chaos: {killed} SIGKILLs over {CHAOS_SECONDS}s, {total} jobs: "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + f"; 0 running, 0 workers dead but by SIGKILL, {len(keys)} business rows, each once"
        )
    assert killed >= CHAOS_SECONDS / KILL_EVERY / 2
