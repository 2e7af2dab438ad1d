"""Jobs start within milliseconds: LISTEN/NOTIFY wakes idle workers, and survives the loss of
its connection and a restart of PostgreSQL. Polling (``POLL_INTERVAL``, here its default of
1 s) is only the fallback, so a fast pickup below can only come from a notification."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job
from django_jobs.runtime.listener import CHANNEL
from django_jobs.states import JobStatus
from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import WorkerProcess, listening_workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT_POLL = {"DJANGO_JOBS_POLL_INTERVAL": "1.0"}


def pickup_ms(job: Job) -> float:
    """From the enqueueing to the start, both by the database's clock."""
    wait_for(lambda: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what=f"job {job.id} to run")
    row = Job.objects.get(id=job.id)
    assert row.started_at is not None
    return (row.started_at - row.created_at).total_seconds() * 1000


def pickups(count: int) -> list[float]:
    samples = []
    for _ in range(count):
        samples.append(pickup_ms(enqueue("test.noop", {})))
        time.sleep(0.02)  # the worker is idle again, waiting
    return sorted(samples)


def p95(samples: list[float]) -> float:
    return samples[max(0, round(0.95 * len(samples)) - 1)]


@pytest.fixture
def listening_worker(worker_env: dict[str, str]) -> Iterator[WorkerProcess]:
    worker = WorkerProcess({**worker_env, **DEFAULT_POLL})
    try:
        wait_for(lambda: listening_workers() == 1, what="the worker to LISTEN")
        yield worker
    finally:
        worker.stop()


def test_an_idle_worker_starts_a_new_job_within_milliseconds(listening_worker: WorkerProcess) -> None:
    samples = pickups(50)
    # A loose bound for a shared machine; bench/ measures the real figure.
    assert p95(samples) < 50, f"pickup ms: median {statistics.median(samples):.1f}, p95 {p95(samples):.1f}"


def test_a_scheduled_job_starts_when_due_not_at_the_next_poll(listening_worker: WorkerProcess) -> None:
    jobs = [enqueue("test.noop", {}, delay=delay) for delay in (0.6, 1.1, 1.7)]
    for job in jobs:
        wait_for(lambda job=job: Job.objects.get(id=job.id).status == JobStatus.COMPLETED, what="due jobs")
    started = Job.objects.filter(id__in=[j.id for j in jobs])
    late = [(j.started_at - j.available_at).total_seconds() for j in started if j.started_at]
    # Polling every second would start each one up to a second late.
    assert all(0 <= seconds < 0.15 for seconds in late), late


def test_the_listener_comes_back_after_its_connection_is_killed(listening_worker: WorkerProcess) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            [f"LISTEN {CHANNEL}"],
        )
    during = enqueue("test.noop", {})  # perhaps while nobody listens: found within a poll
    assert pickup_ms(during) < 1500
    wait_for(lambda: listening_workers() == 1, what="the worker to LISTEN again")
    assert p95(pickups(10)) < 50
    assert "listening connection lost" in listening_worker.output()


def test_notifications_are_sent_at_commit_once_per_queue() -> None:
    with psycopg.connect(**_listen_params(), autocommit=True) as ear:
        ear.execute(f"LISTEN {CHANNEL}")

        with transaction.atomic():
            enqueue("test.noop", {})
            transaction.set_rollback(True)
        assert _heard(ear) == []  # a rolled-back job wakes nobody

        with transaction.atomic():
            for _ in range(3):
                enqueue("test.noop", {})
            enqueue("test.noop", {}, queue="emails")
            assert _heard(ear, wait=0.1) == []  # nothing before the commit
        assert sorted(_heard(ear)) == ["default", "emails"]

        enqueue_many("test.noop", [{} for _ in range(10_000)])
        assert _heard(ear) == ["default"]  # one statement, one notification
        enqueue("test.noop", {}, delay=30)
        (scheduled,) = _heard(ear)
        queue, due_in = scheduled.split(" ")
        assert queue == "default" and 29 < float(due_in) <= 30
        enqueue_many("test.noop", [{} for _ in range(1_000)], delay=30)
        (scheduled,) = _heard(ear)  # the rows of one call share their due time: one
        assert scheduled.startswith("default ")

        # A job enqueued late in its transaction is due at once, not "due in" the time the
        # transaction had run before it: its worker starts it at the commit, without a timer.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.2)")
            enqueue("test.noop", {})
            enqueue_many("test.noop", [{}, {}])
        assert _heard(ear) == ["default"]


def _listen_params() -> dict[str, object]:
    settings = connection.settings_dict
    return {"host": settings["HOST"], "port": settings["PORT"] or 5432, "user": settings["USER"],
            "dbname": settings["NAME"]}  # fmt: skip


def _heard(conn: psycopg.Connection[object], wait: float = 0.3) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=wait)]


@pytest.mark.slow
def test_pickups_are_fast_again_after_postgresql_restarts() -> None:
    cluster = ThrowawayCluster()
    worker = None
    try:
        cluster.create()
        env = {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
        env.update(DEFAULT_POLL)
        cluster.migrate(env)
        worker = WorkerProcess(env)
        listening = f"SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN {CHANNEL}'"
        wait_for(lambda: cluster.scalar(listening) == 1, what="the worker to LISTEN")
        cluster.stop("immediate")
        time.sleep(1)
        cluster.start()
        wait_for(lambda: cluster.scalar(listening) == 1, timeout=30, what="the worker to LISTEN again")

        def pickup() -> float:
            with cluster.connect() as conn:
                (job_id,) = conn.execute(
                    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority,"
                    " attempts, max_attempts) VALUES ('default', 'test.noop', 1, '{}', 'pending', 0, 0, 5)"
                    " RETURNING id"
                ).fetchone()
            done = f"SELECT count(*) FROM django_jobs_job WHERE id = {job_id} AND status = 'completed'"
            wait_for(lambda: cluster.scalar(done) == 1, what="the job to run")
            took = (
                "SELECT ceil(extract(epoch FROM started_at - created_at) * 1000)"
                f" FROM django_jobs_job WHERE id = {job_id}"
            )
            return float(cluster.scalar(took))

        samples = sorted(pickup() for _ in range(10))
        assert statistics.median(samples) < 50, samples  # polling would give ~500 ms
    finally:
        if worker is not None:
            worker.stop()
        cluster.destroy()


def test_with_notify_off_a_worker_polls_every_poll_interval(worker_env: dict[str, str]) -> None:
    worker = WorkerProcess({**worker_env, **DEFAULT_POLL, "DJANGO_JOBS_NOTIFY": "0"})
    try:
        wait_for(lambda: "worker started" in worker.output(), what="the worker to start")
        assert listening_workers() == 0
        samples = [pickup_ms(enqueue("test.noop", {})) for _ in range(3)]
        assert max(samples) < 1600, samples  # within a poll interval (and the claim)
    finally:
        worker.stop()
