"""Article test 12: PostgreSQL restarts during a backlog with running workers."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.slow

JOBS = 400


@pytest.fixture
def cluster() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        yield pg
    finally:
        pg.destroy()


def test_12_workers_ride_out_a_database_restart(cluster: ThrowawayCluster) -> None:
    env = {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    cluster.migrate(env)
    ride_out_a_restart(cluster, env)


def ride_out_a_restart(cluster: ThrowawayCluster, env: dict[str, str]) -> None:
    """A backlog under way on two workers of ``env`` (migrated already), PostgreSQL crashes and
    comes back: every job completes once, and the workers are still there."""
    with cluster.connect() as conn:
        conn.execute(
            "INSERT INTO django_jobs_job"
            " (queue, type, version, payload, status, priority, attempts, max_attempts)"
            " SELECT 'default', 'test.chaos', 1, jsonb_build_object('n', i, 'pause', 0.02),"
            " 'pending', 0, 0, 50 FROM generate_series(1, %s) AS i",
            [JOBS],
        )
    workers = [WorkerProcess(env, "--concurrency", "2") for _ in range(2)]
    try:
        finished = "SELECT count(*) FROM django_jobs_job WHERE status = 'completed'"
        wait_for(lambda: cluster.scalar(finished) >= 40, what="the backlog to be under way")

        cluster.stop("immediate")  # a crash of the server: connections die mid-statement
        time.sleep(2)
        assert all(w.process.poll() is None for w in workers), "a worker died with the database"
        cluster.start()

        wait_for(lambda: cluster.scalar(finished) == JOBS, timeout=90, what="every job to complete")
        assert all(w.process.poll() is None for w in workers), "workers must reconnect by themselves"
        assert cluster.scalar("SELECT count(*) FROM django_jobs_job WHERE status <> 'completed'") == 0
        assert cluster.scalar("SELECT count(*) FROM testjobs_businessrow") == JOBS  # each effect once
        for worker in workers:
            worker.send(signal.SIGTERM)
        assert [w.wait() for w in workers] == [0, 0]
        logs = "".join(w.output() for w in workers)
        assert "database unavailable" in logs
    finally:
        for worker in workers:
            worker.stop()
