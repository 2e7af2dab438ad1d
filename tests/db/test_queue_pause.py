"""Pausing and resuming a queue from Python and from `manage.py jobsqueue`: what the claim
takes, what is recorded, what is refused, and what the workers hear."""

from __future__ import annotations

import threading
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction

from django_jobs import enqueue, pause_queue, resume_queue
from django_jobs.console.pausing import InvalidQueue, paused_queues
from django_jobs.models import Job, Queue, QueueEvent
from django_jobs.runtime.listener import CHANNEL
from django_jobs.runtime.pool import Held
from django_jobs.runtime.worker import Worker
from django_jobs.states import JobStatus
from django_jobs.testing import run_jobs, run_until_settled
from django_jobs.transitions import ActionRefused, ClaimStatement, Outcome, any_active, claim, write_outcomes
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_QUEUE = ClaimStatement("w", None, {"test.noop": 1})
NAMED = ClaimStatement("w", ["default", "emails"], {"test.noop": 1})


def claimed_ids(statement: ClaimStatement) -> set[int]:
    return {c.id for c in claim(statement, 100)}


@pytest.mark.parametrize("statement", [EVERY_QUEUE, NAMED], ids=["every queue", "named queues"])
def test_the_claim_skips_a_paused_queue_until_it_is_resumed(statement: ClaimStatement) -> None:
    emails = JobFactory(queue="emails", priority=100)
    other = JobFactory(queue="default")
    pause_queue("emails", actor="ops", reason="provider outage")
    assert claimed_ids(statement) == {other.id}
    resume_queue("emails", actor="ops", reason="provider back")
    assert claimed_ids(statement) == {emails.id}


def test_a_paused_queue_accepts_jobs_and_runs_them_once_resumed() -> None:
    pause_queue("default", actor="ops", reason="deploy of the mail service")
    with transaction.atomic():
        job = enqueue("test.noop", {})
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.attempts == 0
    resume_queue("default", actor="ops", reason="deploy done")
    run_until_settled()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED


def test_a_running_job_of_a_paused_queue_finishes() -> None:
    running = JobFactory(running=True)
    pause_queue("default", actor="ops", reason="incident")
    assert write_outcomes([Outcome(running.id, running.execution_id, JobStatus.COMPLETED)]) == {running.id}


def test_pause_and_resume_are_recorded_with_who_and_why() -> None:
    pause_queue("default", actor="alice", reason="provider outage")
    (paused,) = paused_queues()
    assert (paused.name, paused.paused_by, paused.reason) == ("default", "alice", "provider outage")
    resume_queue("default", actor="bob", reason="provider back")
    pause_queue("default", actor="carol", reason="again")
    assert [(e.kind, e.actor, e.reason) for e in QueueEvent.objects.order_by("id")] == [
        ("paused", "alice", "provider outage"),
        ("resumed", "bob", "provider back"),
        ("paused", "carol", "again"),
    ]
    assert Queue.objects.get(name="default").paused_by == "carol"


@pytest.mark.parametrize(
    ("name", "actor", "reason", "error"),
    [
        ("no-such-queue", "ops", "why", InvalidQueue),
        ("!paused", "ops", "why", InvalidQueue),
        ("default\n", "ops", "why", InvalidQueue),
        ("de\x00fault", "ops", "why", InvalidQueue),
        ("x" * 101, "ops", "why", InvalidQueue),
        ("default", "ops", "  ", ValueError),
        ("default", "ops", "bad\x00reason", ValueError),
        ("default", "", "why", ValueError),
        ("default", "ops", "x" * 2001, ValueError),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(name: str, actor: str, reason: str, error: type) -> None:
    with pytest.raises(error):
        pause_queue(name, actor=actor, reason=reason)
    assert not Queue.objects.exists() and not QueueEvent.objects.exists()


def test_pausing_twice_or_resuming_a_running_queue_is_refused() -> None:
    with pytest.raises(ActionRefused, match="not paused"):
        resume_queue("default", actor="ops", reason="why")
    pause_queue("default", actor="ops", reason="first")
    with pytest.raises(ActionRefused, match="paused already"):
        pause_queue("default", actor="ops", reason="second")
    assert QueueEvent.objects.count() == 1 and Queue.objects.get().reason == "first"


def test_a_queue_known_only_from_its_jobs_can_be_paused() -> None:
    JobFactory(queue="imports", completed=True)
    pause_queue("imports", actor="ops", reason="bad file upstream")
    assert [q.name for q in paused_queues()] == ["imports"]


def test_pause_and_resume_notify_the_workers_at_commit() -> None:
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"], dbname=settings["NAME"],
        autocommit=True,
    ) as ear:  # fmt: skip
        ear.execute(f"LISTEN {CHANNEL}")
        with transaction.atomic():
            pause_queue("default", actor="ops", reason="why")
            assert [n.payload for n in ear.notifies(timeout=0.1)] == []  # nothing before the commit
        assert [n.payload for n in ear.notifies(timeout=0.3)] == ["!paused default"]
        resume_queue("default", actor="ops", reason="why")
        assert [n.payload for n in ear.notifies(timeout=0.3)] == ["!resumed default"]


def test_jobsqueue_command_pauses_lists_and_resumes() -> None:
    JobFactory(queue="emails")
    out = StringIO()
    call_command(
        "jobsqueue", "pause", "emails", "--reason", "provider outage", "--actor", "alice", stdout=out
    )
    call_command("jobsqueue", "list", stdout=out)
    call_command("jobsqueue", "resume", "emails", "--reason", "provider back", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "queue emails paused"
    assert "default\trunning" in lines
    assert any(
        line.startswith("emails\tpaused since ") and "by alice: provider outage" in line for line in lines
    )
    assert lines[-1] == "queue emails resumed"
    assert not paused_queues()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause", "nope", "--reason", "x"], "no job type names the queue"),
        (["pause", "default", "--reason", ""], "say who and why"),
        (["resume", "default", "--reason", "x"], "not paused"),
        (["pause", "bad name", "--reason", "x"], "not a valid queue name"),
    ],
)
def test_jobsqueue_command_errors_are_clear(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("jobsqueue", *args)
    assert not QueueEvent.objects.exists()


def test_an_until_settled_worker_does_not_wait_for_a_paused_queue() -> None:
    JobFactory(queue="default")
    pause_queue("default", actor="ops", reason="why")
    assert not any_active(types=["test.noop"], queues=[])
    worker = Worker(until_settled=True, grace=1.0)

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)  # the paused job waits for a person, not for this worker
    assert not thread.is_alive()
    assert Job.objects.get().status == JobStatus.PENDING


def test_jobs_prefetched_before_a_pause_are_given_back_unstarted() -> None:
    emails, other = JobFactory(queue="emails"), JobFactory(queue="default")
    worker = Worker(concurrency=1)  # its pool is not started: whatever it holds stays buffered
    worker._pool.submit([Held(c, worker._producer.lease_for(c)) for c in claim(NAMED, 100, start_now=0)])
    pause_queue("emails", actor="ops", reason="why")
    worker._producer.note_paused("emails")  # what its listener does on "!paused emails"
    worker._producer.give_back_paused()
    worker._writer.flush(force=True)
    emails.refresh_from_db()
    assert (emails.status, emails.attempts) == (JobStatus.PENDING, 0)  # back, and no attempt used
    assert Job.objects.get(id=other.id).status == JobStatus.RUNNING  # another queue's job stays held
