"""The worker's services, one turn at a time (``run_once()``), on real PostgreSQL and without
their threads: the producer (django_jobs/runtime/producer.py), the outcome writer
(django_jobs/runtime/writer.py) and the wake-up (django_jobs/runtime/wakeup.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.decision import Happened
from django_jobs.models import Job
from django_jobs.runtime import writer as writer_module
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.producer import ProducerTurn
from django_jobs.runtime.worker import Worker
from django_jobs.runtime.writer import WriterTurn
from django_jobs.states import JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def long_polls() -> Iterator[None]:
    with override_settings(DJANGO_JOBS={"POLL_INTERVAL": 30.0, "PREFETCH_SECONDS": 0.01}):
        yield


def _statuses() -> dict[JobStatus, int]:
    counts: dict[JobStatus, int] = {}
    for status in Job.objects.values_list("status", flat=True):
        counts[JobStatus(status)] = counts.get(JobStatus(status), 0) + 1
    return counts


def _kill_own_connection() -> None:
    """Cut this thread's database connection from the server's side, as a restart would."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname=settings["NAME"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


# ---- the producer -------------------------------------------------------------------------------------


def test_the_producer_claims_one_job_per_slot_and_no_more() -> None:
    for _ in range(5):
        enqueue("test.noop", {})
    worker = Worker(concurrency=2)  # its pool is not started: whatever it claims stays buffered
    assert worker._producer.run_once() == ProducerTurn(claimed=2)
    assert worker._producer.run_once() == ProducerTurn(claimed=0)  # no room left
    assert worker._pool.counts()[:2] == (2, 0)  # buffered, running
    assert _statuses() == {JobStatus.RUNNING: 2, JobStatus.PENDING: 3}


def test_the_producer_claims_no_more_of_a_queue_than_its_slots() -> None:
    for _ in range(3):
        enqueue("test.noop", {}, queue="emails")
    enqueue("test.noop", {}, queue="reports")
    worker = Worker(concurrency=3, queues=["emails", "reports"], queue_slots={"emails": 1, "reports": 2})
    assert worker._producer.run_once().claimed == 2
    assert sorted(Job.objects.filter(status=JobStatus.RUNNING).values_list("queue", flat=True)) == [
        "emails",
        "reports",
    ]


def test_the_producer_gives_back_prefetched_jobs_no_slot_took_in_time() -> None:
    jobs = [enqueue("test.noop", {}) for _ in range(2)]
    worker = Worker(concurrency=2)
    producer = worker._producer
    assert producer.run_once() == ProducerTurn(claimed=2)
    producer.buffer_wait = 0.0  # every buffered job is now overdue
    # Given back, but their release is not written yet: the claim of this turn finds nothing.
    assert producer.run_once() == ProducerTurn(claimed=0, given_back=2)
    assert worker._pool.counts()[:2] == (0, 0)
    assert worker._writer.run_once() == WriterTurn(written=2)
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)  # no attempt used
    assert worker.stats.released == 2


def test_the_producer_claims_nothing_and_gives_back_its_prefetch_while_the_heartbeat_is_unanswered() -> None:
    for _ in range(3):
        enqueue("test.noop", {})
    worker = Worker(concurrency=2)
    producer = worker._producer
    assert producer.run_once().claimed == 2
    # The heartbeat has been trying to reach the database for longer than the shortest lease.
    worker._heartbeat._unanswered_since = time.monotonic() - 2 * worker._hold_back.unanswered_limit
    assert producer.run_once() == ProducerTurn(claimed=0, given_back=2)
    assert worker.holding_back and worker.stats.held_back == 1
    worker._writer.run_once()
    assert _statuses() == {JobStatus.PENDING: 3}


def test_a_refused_executor_holds_claims_off_longer_each_time_until_a_handler_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    enqueue("test.noop", {})
    worker = Worker(concurrency=1)
    producer = worker._producer
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        producer.back_off_claims()
        assert producer.outage_until > time.monotonic()
        assert producer.run_once() == ProducerTurn(claimed=0)  # held off: the job stays pending
        producer.back_off_claims()
        producer.ran(0.01)  # the database answered an executor: the next refusal starts over
        producer.back_off_claims()
    refusals = [r.getMessage() for r in caplog.records if "refused an executor" in r.getMessage()]
    assert refusals == [
        f"jobs database refused an executor: no claims for {s}s" for s in ("0.1", "0.2", "0.1")
    ]
    assert _statuses() == {JobStatus.PENDING: 1}


# ---- the outcome writer -------------------------------------------------------------------------------


def test_the_writer_writes_what_waits_in_one_batch() -> None:
    for _ in range(3):
        enqueue("test.noop", {})
    worker = Worker(concurrency=3)
    worker._producer.run_once()
    held = worker._pool.take_buffered()
    assert worker._writer.run_once() == WriterTurn(written=0)  # nothing waits yet
    assert worker._writer.add([Finished(h.claim, Happened.NOT_STARTED) for h in held])
    assert worker._writer.unwritten
    assert worker._writer.run_once() == WriterTurn(written=3)
    assert not worker._writer.unwritten
    assert _statuses() == {JobStatus.PENDING: 3}


def test_the_writer_keeps_its_outcomes_while_the_database_is_away_and_writes_them_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = enqueue("test.noop", {})
    worker = Worker(concurrency=1)
    worker._producer.run_once()
    held = worker._pool.take_buffered()
    worker._writer.add([Finished(h.claim, Happened.NOT_STARTED) for h in held])
    _kill_own_connection()
    caplog.set_level(logging.INFO, logger="django_jobs.outcomes")
    turn = worker._writer.run_once()
    assert (turn.written, turn.retry_in) == (0, 0.1)  # the first wait of the back-off
    assert worker._writer.unwritten and worker._writer.holds_back_claims
    assert worker._producer.claim_if_room() == 0  # no claim while its outcomes wait
    assert worker._writer.run_once() == WriterTurn(written=1)  # a new connection: written
    assert not worker._writer.holds_back_claims
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
    # Said once, when it was written: not also for the write the outage refused.
    said = [r.getMessage() for r in caplog.records if r.name == "django_jobs.outcomes"]
    assert [line.split(" id=")[0] for line in said] == ["job released"]


def test_while_batches_of_outcomes_pile_up_claims_wait_and_each_statement_writes_a_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for _ in range(9):
        enqueue("test.noop", {})
    worker = Worker(concurrency=9, batch_size=2)
    held = []
    while len(held) < 9:
        worker._producer.run_once()
        held += worker._pool.take_buffered()
    statements: list[int] = []
    record = writer_module.outcomes.record

    def counting(batch: list[Finished], *, worker_id: str) -> object:
        statements.append(len(batch))
        return record(batch, worker_id=worker_id)

    monkeypatch.setattr(writer_module.outcomes, "record", counting)
    worker._writer.add([Finished(h.claim, Happened.NOT_STARTED) for h in held[:7]])
    assert not worker._writer.holds_back_claims  # fewer than BACKLOG_BATCHES batches of 2 wait
    worker._writer.add([Finished(h.claim, Happened.NOT_STARTED) for h in held[7:]])
    assert worker._writer.holds_back_claims
    assert worker._producer.claim_if_room() == 0  # no claim while they wait
    worker._wake.clear()
    assert worker._writer.run_once() == WriterTurn(written=9)
    assert statements == [writer_module.BACKLOG_BATCHES * 2, 1]
    assert not worker._writer.holds_back_claims
    assert worker._wake.is_set()  # the claim loop goes on at once
    assert _statuses() == {JobStatus.PENDING: 9}


def test_the_writer_refuses_outcomes_once_closed() -> None:
    worker = Worker(concurrency=1)
    worker._writer.close()
    assert not worker._writer.add([])


# ---- the wake-up --------------------------------------------------------------------------------------


def test_the_wakeup_waits_until_the_next_job_the_outlook_found_is_due() -> None:
    enqueue("test.noop", {}, delay=2.0)
    worker = Worker(concurrency=1)  # runs until stopped: it reads its outlook at the first turn
    assert worker._wakeup.claim_and_look(True, worker._producer.claim_if_room) == 0
    wait = worker._wakeup.idle_wait(stall=300.0, holding_back=False, outage_until=0.0)
    assert 1.0 < wait <= 2.1


def test_the_wakeup_claims_at_once_when_a_job_is_due_now() -> None:
    enqueue("test.noop", {})
    worker = Worker(concurrency=1)
    assert worker._wakeup.claim_and_look(True, worker._producer.claim_if_room) == 1


def test_the_wakeup_waits_for_a_job_the_listener_heard_of_and_no_longer_than_an_outage() -> None:
    worker = Worker(concurrency=1, burst=True)
    wakeup = worker._wakeup
    assert wakeup.idle_wait(stall=300.0, holding_back=False, outage_until=0.0) == 30.0  # the poll
    wakeup.note_due(0.5)
    assert 0.3 < wakeup.idle_wait(stall=300.0, holding_back=False, outage_until=0.0) <= 0.51
    soon = time.monotonic() + 0.2
    assert wakeup.idle_wait(stall=300.0, holding_back=False, outage_until=soon) <= 0.2
    assert wakeup.idle_wait(stall=0.4, holding_back=False, outage_until=0.0) <= 0.1  # the loop's sign of life
