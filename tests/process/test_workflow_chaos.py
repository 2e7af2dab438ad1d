"""Workflows under chaos: a chain and a group of 2,000 with callbacks run on three workers, one
of them SIGKILLed every ~1.5 s. Every member completes, every callback becomes due and runs
once, and nothing is left waiting."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobs import Step, enqueue_chain, enqueue_group
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MEMBERS = 2000
WORKERS = 3
CHAOS_SECONDS = 20
KILL_EVERY = 1.5
LIVE = [JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING]


def step(key: str, **payload: object) -> Step:
    return Step("test.step", {"key": key, **payload}, max_attempts=50)


def callback(key: str) -> Step:
    return Step("test.summarise", {"key": key}, max_attempts=50)


def test_sigkilled_workers_fire_every_callback_once_and_leave_nothing_waiting(
    worker_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    chain = enqueue_chain(
        step("charge", sleep=1.0),
        step("reserve", sleep=1.0, read_parent=True),
        step("email", read_parent=True),
    )
    group = enqueue_group(
        [step(f"account:{n}", n=n, sleep=0.02) for n in range(MEMBERS)],
        on_success=callback("report:ok"),
        on_failure=callback("report:bad"),
        on_complete=callback("report:done"),
    )
    ours = Job.objects.filter(workflow_id__in=[chain.id, group.id])
    rng = random.Random(20261203)
    workers = [WorkerProcess(worker_env) for _ in range(WORKERS)]
    killed = 0
    try:
        chaos_ends = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < chaos_ends and ours.filter(status__in=LIVE).exists():
            time.sleep(KILL_EVERY * rng.uniform(0.5, 1.5))
            victim = rng.randrange(WORKERS)
            workers[victim].kill()
            workers[victim].stop()
            workers[victim] = WorkerProcess(worker_env)
            killed += 1
        wait_for(lambda: not ours.filter(status__in=LIVE).exists(), timeout=180, what="the workflows to end")
        wait_for(lambda: all("worker started" in w.output() for w in workers), what="every worker to be up")
        for worker in workers:
            worker.send(signal.SIGTERM)
        assert [w.wait() for w in workers] == [0] * WORKERS
    finally:
        for worker in workers:
            worker.stop()

    # Every member and the chain's steps completed; on_success and on_complete ran, on_failure
    # was not needed. Each waiting job became due exactly once (one `due` event), whatever the
    # kills, and each business effect happened once.
    by_status = {s: ours.filter(status=s).count() for s in ("completed", "cancelled")}
    assert by_status == {"completed": MEMBERS + 3 + 2, "cancelled": 1}, by_status
    assert not ours.exclude(status__in=["completed", "cancelled"]).exists()
    not_needed = ours.get(step__role="on_failure")
    assert not_needed.last_error == "not run: every job it waited for succeeded"
    waiting_born = ours.exclude(step__waits_on=None)
    dues = JobEvent.objects.filter(job__in=waiting_born, kind=EventKind.DUE)
    assert dues.count() == waiting_born.count() - 1 == 2 + 2
    assert dues.values("job").distinct().count() == dues.count()
    done = ours.get(step__role="on_complete")
    assert done.return_value == {"summary": {"completed": MEMBERS}, "read": MEMBERS}
    assert ours.get(step__role="step", payload__key="email").return_value["parent"]["parent"] is not None
    keys = list(BusinessRow.objects.values_list("key", flat=True))
    assert len(keys) == len(set(keys)) == MEMBERS + 3 + 2
    recovered = JobEvent.objects.filter(job__in=ours, kind=EventKind.RECOVERED).count()
    with capsys.disabled():
        print(
            f"\nworkflow chaos: {killed} SIGKILLs, {recovered} executions recovered, "
            f"{ours.filter(attempts__gt=1).count()} jobs ran more than once, every callback due once"
        )
    assert killed >= 5
