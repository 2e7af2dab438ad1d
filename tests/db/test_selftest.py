"""The self-test's refusals, its one-run-per-queue marker, its clean-up and its queue-limited
recovery, on rows built directly (the whole run, with real workers, is in
tests/process/test_selftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_jobs import enqueue, pause_queue
from django_jobs.maintenance import rescuer
from django_jobs.models import Job, JobEvent, LiveWorker, ProcessedEffect
from django_jobs.registry import JobType, registry
from django_jobs.selftest import cleanup, lock, preflight, processes
from django_jobs.selftest import jobs as selftest_jobs
from django_jobs.selftest.harness import GuaranteeBroken, Harness, Plan
from django_jobs.selftest.jobs import EFFECT, RUN, TYPES, applied_key, effect_key, worker_id
from django_jobs.states import JobStatus
from django_jobs.transitions import removal
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "selftest_q"
#: Registered by the import above, as in the self-test's processes; taken out at once and put
#: back only for these tests, so that the rest of the suite sees the registry as the project's
#: own processes do.
SELFTEST_TYPES: list[JobType] = [t for name in TYPES if (t := registry.get(name)) is not None]
for _name in TYPES:
    registry.unregister(_name)


@pytest.fixture(autouse=True, scope="module")
def selftest_types_registered() -> Iterator[None]:
    assert selftest_jobs.PREFIX and len(SELFTEST_TYPES) == len(TYPES)
    for job_type in SELFTEST_TYPES:
        registry.register(job_type)
    yield
    for name in TYPES:
        registry.unregister(name)


def everything() -> tuple[Any, ...]:
    """What a refused self-test must not have changed."""
    return (
        sorted(Job.objects.values_list("id", "queue", "type", "status")),
        JobEvent.objects.count(),
        ProcessedEffect.objects.count(),
        LiveWorker.objects.count(),
    )


def test_a_queue_with_a_job_of_the_project_is_refused_and_nothing_is_written() -> None:
    JobFactory(queue=QUEUE, type="test.noop", completed=True)  # finished work counts too
    before = everything()
    with pytest.raises(preflight.Refused, match=r"holds 1 job\(s\) that are not the self-test's"):
        preflight.check(QUEUE)
    assert everything() == before


def test_a_paused_queue_is_refused() -> None:
    enqueue(EFFECT, {"run": "old1"}, queue=QUEUE)  # a queue is paused once it is known
    pause_queue(QUEUE, actor="ops", reason="maintenance")
    with pytest.raises(preflight.Refused, match=r"is paused .*by ops: maintenance"):
        preflight.check(QUEUE)


@override_settings(DJANGO_JOBS={"QUEUES": ["default", "emails"]})
def test_a_queue_the_project_does_not_declare_is_refused_with_what_to_do() -> None:
    with pytest.raises(preflight.Refused, match=r"Declare 'selftest_q' in DJANGO_JOBS\['QUEUES'\]"):
        preflight.check(QUEUE)
    with override_settings(DJANGO_JOBS={"QUEUES": ["default", QUEUE]}):
        preflight.check(QUEUE)


def test_the_role_of_the_tests_may_write_what_the_self_test_writes() -> None:
    # The refusal of a role that may not is tested with such a role, on a throwaway cluster.
    assert preflight.needed_privileges()[1] == ("django_jobs_job", "INSERT")
    preflight.check(QUEUE)


def test_a_second_run_on_the_same_queue_is_refused_and_told_who_holds_it() -> None:
    first = lock.take(QUEUE, "run1")
    assert (first.type, first.status, first.unique_key) == (RUN, JobStatus.PENDING, f"queue:{QUEUE}")
    with pytest.raises(preflight.Refused, match=r"another self-test holds queue 'selftest_q': run run1"):
        lock.take(QUEUE, "run2")
    with pytest.raises(preflight.Refused, match=r"run run1, .* --clean --queue selftest_q"):
        preflight.check(QUEUE)
    assert Job.objects.filter(queue=QUEUE).count() == 1
    assert not lock.runs_here(first)  # its pid is this process's own: not another run


def test_jobs_an_earlier_run_left_are_refused_until_cleaned() -> None:
    enqueue(EFFECT, {"run": "old1"}, queue=QUEUE)
    with pytest.raises(
        preflight.Refused, match=r"earlier self-test left \(run old1.*--clean --queue selftest_q"
    ):
        preflight.check(QUEUE)
    cleanup.remove(QUEUE)
    preflight.check(QUEUE)


def test_clean_up_removes_the_runs_jobs_events_keys_and_workers_and_nothing_else() -> None:
    ours = enqueue(EFFECT, {"run": "r1"}, queue=QUEUE)
    other_run = enqueue(EFFECT, {"run": "r2"}, queue=QUEUE)
    Job.objects.filter(id=ours.id).update(attempts=2)  # two attempts: two possible applied keys
    JobEvent.objects.create(job_id=ours.id, kind="recovered", actor="reaper")
    keys = [effect_key("r1", ours.id), applied_key("r1", ours.id, 2)]
    ProcessedEffect.objects.bulk_create(
        ProcessedEffect(key=k, job_id=ours.id) for k in [*keys, "shop:order:1"]
    )
    LiveWorker.objects.create(
        worker_id=worker_id("r1", "A"), hostname="h", pid=1, queues=QUEUE, concurrency=1
    )  # fmt: skip
    theirs = JobFactory(queue="default", type="test.noop")

    removed = cleanup.remove(QUEUE, ["r1"])

    assert removed == removal.Removed(jobs=1, events=1, effect_keys=2, workers=1)
    assert set(Job.objects.values_list("id", flat=True)) == {other_run.id, theirs.id}
    assert list(ProcessedEffect.objects.values_list("key", flat=True)) == ["shop:order:1"]
    assert not LiveWorker.objects.exists()


def test_removal_never_reaches_a_job_of_another_queue_or_type_whatever_ids_it_is_given() -> None:
    other_queue = JobFactory(queue="default", type=EFFECT)
    other_type = JobFactory(queue=QUEUE, type="test.noop")
    removed = removal.remove(
        ids=[other_queue.id, other_type.id], queue=QUEUE, types=TYPES, effect_keys=[], worker_ids=[]
    )
    assert removed.jobs == 0 and Job.objects.count() == 2


def test_kept_runs_lose_their_marker_only() -> None:
    lock.take(QUEUE, "k1")
    job = enqueue(EFFECT, {"run": "k1"}, queue=QUEUE)
    ProcessedEffect.objects.create(key=effect_key("k1", job.id), job_id=job.id)
    assert cleanup.keep(QUEUE, "k1") == (1, 1)
    assert list(Job.objects.values_list("type", flat=True)) == [EFFECT]
    assert lock.holder(QUEUE) is None


def test_the_runs_recovery_takes_back_its_own_queues_expired_leases_and_no_others() -> None:
    ours = JobFactory(queue=QUEUE, type=EFFECT, running_stale=True, max_attempts=3)
    theirs = JobFactory(queue="default", type="test.noop", running_stale=True)
    assert [r.id for r in rescuer.recover_jobs(queue=QUEUE)] == [ours.id]
    assert Job.objects.get(id=ours.id).status == JobStatus.PENDING
    assert Job.objects.get(id=theirs.id).status == JobStatus.RUNNING


def test_clean_is_refused_while_the_run_holding_the_queue_still_runs_on_this_host() -> None:
    alive = {"run": "x", "host": socket.gethostname(), "pid": os.getppid()}
    marker = JobFactory(queue=QUEUE, type=RUN, payload=alive)
    assert lock.runs_here(marker)
    with pytest.raises(CommandError, match=f"still runs here as pid {os.getppid()}"):
        call_command("jobsselftest", "--clean", "--queue", QUEUE)
    assert Job.objects.filter(id=marker.id).exists()

    ended = subprocess.Popen(["true"])
    ended.wait()
    for payload in ({**alive, "pid": ended.pid}, {**alive, "host": "elsewhere"}):
        Job.objects.filter(id=marker.id).update(payload=payload)
        marker.refresh_from_db()
        assert not lock.runs_here(marker)
    call_command("jobsselftest", "--clean", "--queue", QUEUE)
    assert not Job.objects.exists()


@dataclass(frozen=True)
class HastyPlan(Plan):
    @property
    def patience(self) -> float:
        return 1.0


#: A worker that never comes up: it says where it is stuck, and waits there.
STUCK_WORKER = (
    "import sys, time\n"
    "print('connecting to the database at 10.255.0.1:5432 ...', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_worker_that_never_starts_is_given_up_on_with_what_it_last_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "launcher", lambda: [sys.executable, "-c", STUCK_WORKER])
    harness = Harness(HastyPlan(queue=QUEUE), say=lambda line: None)
    try:
        with pytest.raises(GuaranteeBroken) as given_up:
            harness.start("C")
    finally:
        harness.discard_workers()
    told = str(given_up.value)
    assert told.startswith("gave up after 1 s waiting for worker C to start")
    worker = harness.workers["C"]
    assert f"{worker.label}, running; its last lines:" in told
    assert told.endswith("connecting to the database at 10.255.0.1:5432 ...")
    assert worker.exited() is not None  # discarded: nothing of the run is left running
