"""A durable job on real workers that die: SIGKILL between every two steps and inside each step,
while three workers run and are killed at random besides. Each step's business effect happens
exactly once, the steps are recorded in order, and the job completes."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobs import enqueue
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import assert_steps
from testproject.testjobs.models import EffectLog
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STEPS = [f"s{n}" for n in range(1, 6)]
#: Where attempt n dies (n = 1, 2, …): inside the first step, then before and inside each next
#: one; attempt 10 has nothing planned.
CRASH_PLAN = ["inside:s1"] + [point for name in STEPS[1:] for point in (f"before:{name}", f"inside:{name}")]
WORKERS = 3


def test_a_five_step_durable_job_killed_between_and_inside_its_steps_does_each_effect_once(
    worker_env: dict[str, str],
) -> None:
    script = [["step", "s1"], ["step", "s2"], ["sleep", 0.3], ["step", "s3"], ["step", "s4"], ["step", "s5"]]
    job = enqueue("test.durable", {"run": "chaos", "script": script, "crash_plan": CRASH_PLAN})
    rng = random.Random(20261206)
    workers = [WorkerProcess(worker_env, "--concurrency", "2") for _ in range(WORKERS)]
    random_kills = 0
    try:
        deadline = time.monotonic() + 120
        next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
        while (status := Job.objects.get(id=job.id).status) != JobStatus.COMPLETED:
            # One read per turn: a second read could already see the job completed.
            assert time.monotonic() < deadline, f"not completed: {status}"
            assert status in (JobStatus.PENDING, JobStatus.RUNNING)
            for n, worker in enumerate(workers):  # the job's own SIGKILL took this one: replace it
                if worker.process.poll() is not None:
                    worker.stop()
                    workers[n] = WorkerProcess(worker_env, "--concurrency", "2")
            if time.monotonic() > next_kill and random_kills < 4:  # and chaos besides
                victim = rng.randrange(WORKERS)
                workers[victim].kill()
                workers[victim].stop()
                workers[victim] = WorkerProcess(worker_env, "--concurrency", "2")
                random_kills += 1
                next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
            time.sleep(0.05)
        wait_for(lambda: all("worker started" in w.output() for w in workers), what="every worker to be up")
        for worker in workers:
            worker.send(signal.SIGTERM)
        assert [w.wait() for w in workers] == [0] * WORKERS
    finally:
        for worker in workers:
            worker.stop()

    ended = Job.objects.get(id=job.id)
    assert ended.return_value == STEPS
    effects = {name: EffectLog.objects.filter(key=f"chaos:{name}").count() for name in STEPS}
    assert effects == dict.fromkeys(STEPS, 1)
    assert_steps(job, ["s1", "s2", "sleep#3", "s3", "s4", "s5"])
    # Every planned crash happened (each one recovered by the reaper), and the sleep was slept.
    recovered = JobEvent.objects.filter(job=job, kind=EventKind.RECOVERED).count()
    assert recovered >= len(CRASH_PLAN)
    assert JobEvent.objects.filter(job=job, kind=EventKind.SUSPENDED).exists()
    assert ended.attempts >= len(CRASH_PLAN) + 1
