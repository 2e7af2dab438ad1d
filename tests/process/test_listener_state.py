"""What a worker could not hear, it reads: jobs scheduled before it started, and a job scheduled
or a queue paused while its listening connection was down, take effect as if it had heard them.

Real `runjobs` processes that poll once a second, so a job that starts within a few hundred
milliseconds of its due time was not found by a poll. The notification is lost on purpose and
at the worst moment: the listening connection is terminated (``pg_terminate_backend`` waits
until its backend is gone) inside the very transaction that schedules or pauses, so the
notification goes out at commit while nobody listens; the test then checks that the listener's
new connection began after that commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pytest
from django.db import connection, transaction

from django_jobs import enqueue, pause_queue, resume_queue
from django_jobs.models import Job
from django_jobs.runtime.listener import CHANNEL
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.workers import StartWorker, WorkerProcess, listening_workers, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: Polls once a second; a prefetched job is given back as overdue only after 5 s (10 ×
#: PREFETCH_SECONDS), past the end of the job that keeps the slot busy, and its lease (60 s)
#: never lapses meanwhile.
SLOW_POLL = {
    "DJANGO_JOBS_POLL_INTERVAL": "1.0",
    "DJANGO_JOBS_LEASE_TIMEOUT": "60",
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": "10",
    "DJANGO_JOBS_PREFETCH_SECONDS": "0.5",
}
#: How late a job may start at its due time: well under a poll.
ON_TIME = 0.3


def _statuses(jobs: Iterable[Job]) -> set[str]:
    return set(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("status", flat=True))


def _lateness(jobs: Iterable[Job]) -> list[float]:
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    return [(j.started_at - j.available_at).total_seconds() for j in rows if j.started_at is not None]


def _db_clock() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _cut_listening_connection() -> dt.datetime:
    """Terminate the listening connection and wait until its backend is gone; returns the
    database's clock after that, in the caller's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            [f"LISTEN {CHANNEL}"],
        )
        assert cursor.fetchone()[0] == 1
    return _db_clock()


def _listening_since() -> dt.datetime:
    """When the backend of the (new) listening connection started."""
    wait_for(lambda: listening_workers() == 1, what="the worker to LISTEN again")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT backend_start FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {CHANNEL}"],
        )
        return cursor.fetchone()[0]


def _started_marks(jobs: Iterable[Job]) -> int:
    return BusinessRow.objects.filter(key__startswith="started:", job_id__in=[j.id for j in jobs]).count()


def _start_listening(start_worker: StartWorker, *args: str) -> WorkerProcess:
    # The connections of the previous test's worker go first: "one LISTEN" is then this one's.
    wait_for(lambda: listening_workers() == 0, what="earlier workers' connections to close")
    worker = start_worker(*args, env=SLOW_POLL)
    wait_for(lambda: listening_workers() == 1, what="the worker to LISTEN")
    return worker


def test_jobs_scheduled_before_the_worker_started_start_when_due(start_worker: StartWorker) -> None:
    jobs = [enqueue("test.noop", {}, delay=delay) for delay in (3.0, 3.8, 4.6, 5.4)]
    _start_listening(start_worker)
    up_at = _db_clock()
    wait_for(lambda: _statuses(jobs) == {JobStatus.COMPLETED}, what="the scheduled jobs")
    # Those due once the worker was up: it heard of none of them (they were announced before).
    due_later = [j for j in Job.objects.filter(id__in=[j.id for j in jobs]) if j.available_at > up_at]
    assert len(due_later) >= 2, "the worker took too long to start for this test to say anything"
    assert all(0 <= late < ON_TIME for late in _lateness(due_later)), _lateness(due_later)


@pytest.fixture
def listening_worker(start_worker: StartWorker) -> WorkerProcess:
    return _start_listening(start_worker, "--concurrency", "1")


def test_a_job_scheduled_while_the_listener_reconnects_starts_when_due(
    listening_worker: WorkerProcess,
) -> None:
    with transaction.atomic():
        cut_at = _cut_listening_connection()
        job = enqueue("test.noop", {}, delay=1.5)  # its notification goes out to nobody
    assert _listening_since() > cut_at, "the listener reconnected before the job was scheduled"
    wait_for(lambda: _statuses([job]) == {JobStatus.COMPLETED}, what="the scheduled job")
    (late,) = _lateness([job])
    assert 0 <= late < ON_TIME, late


def _insert_unannounced() -> int:
    """A job due now whose insert fires no trigger, so no notification: as if it were lost."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")  # triggers stay silent
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, available_at, on_lost) VALUES ('default', 'test.noop', 1, '{}', 'pending',"
            " 0, 0, 5, now(), 'retry') RETURNING id"
        )
        return int(cursor.fetchone()[0])


def test_an_idle_listening_worker_finds_an_unannounced_job_within_a_poll(
    listening_worker: WorkerProcess,
) -> None:
    for _ in range(3):  # each right after the last one ran: the worker has just gone idle
        job_id = _insert_unannounced()
        wait_for(lambda job_id=job_id: _statuses([Job(id=job_id)]) == {JobStatus.COMPLETED}, what="the job")
        job = Job.objects.get(id=job_id)
        assert job.started_at is not None
        # POLL_INTERVAL is 1 s; the claim and a loaded machine get half a second more.
        assert (job.started_at - job.created_at).total_seconds() < 1.5


def _prefetch_behind_a_busy_slot() -> tuple[Job, list[Job]]:
    """A worker with one slot runs a 2-second job of the default queue and holds two jobs of
    the emails queue prefetched behind it."""
    warm_up = [enqueue("test.noop", {}) for _ in range(5)]  # jobs are short: it prefetches
    wait_for(lambda: _statuses(warm_up) == {JobStatus.COMPLETED}, what="the warm-up jobs")
    with transaction.atomic():  # one commit: one claim takes them all
        busy = enqueue("test.long", {"seconds": 2.0}, priority=10)
        behind = [enqueue("test.long", {"seconds": 0.01}, queue="emails") for _ in range(2)]
    wait_for(lambda: _started_marks([busy]) == 1, what="the busy job to start")
    wait_for(lambda: _statuses(behind) == {JobStatus.RUNNING}, what="the jobs behind it to be prefetched")
    assert _started_marks(behind) == 0
    return busy, behind


def _assert_given_back_unstarted(busy: Job, behind: list[Job]) -> None:
    # Given back while the busy job still ran, so no slot was free to start them.
    wait_for(lambda: _statuses(behind) == {JobStatus.PENDING}, what="the paused jobs to be given back")
    wait_for(lambda: _statuses([busy]) == {JobStatus.COMPLETED}, what="the busy job to finish")
    assert _statuses(behind) == {JobStatus.PENDING}
    assert _started_marks(behind) == 0
    assert not Job.objects.filter(id__in=[j.id for j in behind], attempts__gt=0).exists()
    # Nothing was lost: once the queue is resumed they run.
    resume_queue("emails", actor="ops", reason="done")
    wait_for(lambda: _statuses(behind) == {JobStatus.COMPLETED}, what="the resumed jobs")


def test_a_pause_while_the_listener_reconnects_gives_back_prefetched_jobs(
    listening_worker: WorkerProcess,
) -> None:
    busy, behind = _prefetch_behind_a_busy_slot()
    with transaction.atomic():
        cut_at = _cut_listening_connection()
        pause_queue("emails", actor="ops", reason="provider outage")  # notified to nobody
    assert _listening_since() > cut_at, "the listener reconnected before the pause"
    _assert_given_back_unstarted(busy, behind)


def test_with_notify_off_a_pause_gives_back_prefetched_jobs(start_worker: StartWorker) -> None:
    polling = {**SLOW_POLL, "DJANGO_JOBS_POLL_INTERVAL": "0.2", "DJANGO_JOBS_NOTIFY": "0"}
    start_worker("--concurrency", "1", env=polling)
    busy, behind = _prefetch_behind_a_busy_slot()
    assert listening_workers() == 0
    pause_queue("emails", actor="ops", reason="provider outage")
    _assert_given_back_unstarted(busy, behind)
