"""Real restores on throwaway clusters, real `runjobs` processes: a dump restored into a re-created
database and a point-in-time recovery each open a restore hold, and the jobs of external types
that ran after the backup wait while the others run; a restart, and a failover to a replica
that had every commit, hold nothing; a failover to a replica that lost commits a running worker
saw is held."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.slow

#: `test.unsafe` acts outside the database (on_lost="needs_review"); `test.noop` does not.
ENQUEUE = (
    "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts, max_attempts)"
    " SELECT 'default', %s, 1, '{}', 'pending', 0, 0, 5 FROM generate_series(1, %s)"
)
COUNT = "SELECT count(*) FROM django_jobs_job WHERE type = '{}' AND status = '{}'"
GENERATION = "SELECT coalesce(max(generation), 0) FROM django_jobs_databaseidentity"
ARCHIVED = "SELECT failed_count = 0 AND last_archived_wal IS NOT NULL FROM pg_stat_archiver"
ROOT = Path(__file__).resolve().parents[2]


def as_postgres(*args: str) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)


def env_of(cluster: ThrowawayCluster) -> dict[str, str]:
    return {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}


def burst(cluster: ThrowawayCluster) -> str:
    """Run one `runjobs --burst` to its end; its log."""
    worker = WorkerProcess(env_of(cluster), "--burst")
    try:
        assert worker.wait(timeout=60) == 0, worker.output()
        return worker.output()
    finally:
        worker.stop()


def holds(cluster: ThrowawayCluster) -> list[tuple[str, bool]]:
    with cluster.connect() as conn:
        rows = conn.execute("SELECT kind, released_at IS NULL FROM django_jobs_restorehold ORDER BY id")
        return [(str(kind), bool(open_)) for kind, open_ in rows.fetchall()]


def owned(path: Path) -> Path:
    """``path``, given to the postgres user when the tests run as root (the server runs as it)."""
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    return path


@pytest.fixture
def cluster() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    archive = pg.dir / "archive"
    archive.mkdir()
    owned(archive)
    # pg_ctl hands its options to a shell: the command is quoted.
    pg.settings = {"archive_mode": "on", "archive_command": f"'cp %p {archive}/%f'"}
    try:
        pg.create()
        pg.migrate(env_of(pg))
        yield pg
    finally:
        pg.destroy()


def test_a_dump_restored_into_a_recreated_database_holds_what_ran_after_it(cluster: ThrowawayCluster) -> None:
    burst(cluster)  # a worker has looked: the database's identity is recorded
    with cluster.connect() as conn:
        conn.execute(ENQUEUE, ["test.unsafe", 3])
    dump = cluster.dir / "jobs.dump"
    subprocess.run(
        ["pg_dump", "-Fc", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-f", str(dump),
         "jobs"],
        check=True, timeout=120,
    )  # fmt: skip
    burst(cluster)  # after the backup, the three jobs ran: their effects are out in the world
    assert cluster.scalar(COUNT.format("test.unsafe", "completed")) == 3

    with psycopg.connect(f"postgres://postgres@127.0.0.1:{cluster.port}/postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE jobs")
        conn.execute("CREATE DATABASE jobs")
    subprocess.run(
        ["pg_restore", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-d", "jobs", str(dump)],
        check=True, timeout=120,
    )  # fmt: skip
    with cluster.connect() as conn:
        conn.execute(ENQUEUE, ["test.noop", 2])  # jobs whose effects stay in the database
    log = burst(cluster)

    assert "restore detected (recreated)" in log
    assert holds(cluster) == [("recreated", True)]
    assert cluster.scalar(COUNT.format("test.unsafe", "pending")) == 3  # held, not repeated
    assert cluster.scalar("SELECT max(attempts) FROM django_jobs_job WHERE type = 'test.unsafe'") == 0
    assert cluster.scalar(COUNT.format("test.noop", "completed")) == 2  # the rest runs

    release = subprocess.run(
        [sys.executable, "manage.py", "jobsrestore", "release", "--reason", "provider checked: none sent"],
        cwd=ROOT, env=env_of(cluster), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert release.returncode == 0, release.stderr
    burst(cluster)
    assert cluster.scalar(COUNT.format("test.unsafe", "completed")) == 3
    assert holds(cluster) == [("recreated", False)]


def test_a_point_in_time_recovery_holds_what_ran_after_the_restore_point(cluster: ThrowawayCluster) -> None:
    burst(cluster)
    with cluster.connect() as conn:
        conn.execute(ENQUEUE, ["test.unsafe", 3])
    backup = cluster.dir / "base"
    as_postgres(
        str(cluster.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
        "-D", str(backup), "-X", "stream", "-c", "fast",
    )  # fmt: skip
    with cluster.connect() as conn:
        conn.execute("SELECT pg_create_restore_point('before_the_runs')")
    burst(cluster)  # ran after the restore point
    assert cluster.scalar(COUNT.format("test.unsafe", "completed")) == 3
    with cluster.connect() as conn:
        conn.execute("SELECT pg_switch_wal()")
        wait_for(
            lambda: conn.execute(ARCHIVED).fetchone()[0],
            what="the WAL to be archived",
        )  # fmt: skip
    cluster.stop()

    # Recover the base backup to the restore point: PostgreSQL promotes it onto a new timeline.
    shutil.rmtree(cluster.data)
    as_postgres("cp", "-a", str(backup), str(cluster.data))
    with (cluster.data / "postgresql.auto.conf").open("a") as conf:
        conf.write(
            f"restore_command = 'cp {cluster.dir}/archive/%f %p'\n"
            "recovery_target_name = 'before_the_runs'\nrecovery_target_action = 'promote'\n"
        )
    recovery = cluster.data / "recovery.signal"
    recovery.touch()
    owned(recovery)
    cluster.start()
    wait_for(lambda: cluster.scalar("SELECT (NOT pg_is_in_recovery())::int") == 1, what="the promotion")
    assert cluster.scalar(COUNT.format("test.unsafe", "pending")) == 3  # as at the restore point
    log = burst(cluster)

    assert "restore detected (new_timeline)" in log
    assert holds(cluster) == [("new_timeline", True)]
    assert cluster.scalar(COUNT.format("test.unsafe", "pending")) == 3


@contextlib.contextmanager
def streaming_replica(cluster: ThrowawayCluster) -> Iterator[tuple[ThrowawayCluster, WorkerProcess]]:
    """A standby of ``cluster`` streaming from it (a cluster of its own, on its own port), and
    a worker on ``cluster`` that looks every 0.2 s; both gone at the end."""
    replica = ThrowawayCluster()
    owned(replica.dir)
    try:
        as_postgres(
            str(cluster.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
            "-D", str(replica.data), "-X", "stream", "-R", "-c", "fast",
        )  # fmt: skip
        replica.start()
        worker = WorkerProcess(env_of(cluster))
        try:
            yield replica, worker
        finally:
            worker.stop()
    finally:
        replica.destroy()


def test_a_restart_and_a_failover_with_every_commit_hold_nothing(cluster: ThrowawayCluster) -> None:
    with streaming_replica(cluster) as (replica, worker):  # the worker runs across everything below
        wait_for(lambda: cluster.scalar(GENERATION) > 3, what="the worker's looks")
        cluster.stop("immediate")  # a crash and a restart: the same database
        cluster.start()
        time.sleep(1.5)
        assert holds(cluster) == []

        # A failover to the replica, which had every commit: once it streams again, the
        # primary's clean stop sends it all.
        streaming = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        wait_for(lambda: cluster.scalar(streaming) == 1, what="the replica to stream again")
        cluster.stop("fast")
        promote_at(replica, cluster.port)
        wait_for(lambda: cluster.scalar("SELECT (NOT pg_is_in_recovery())::int") == 1, what="the promotion")
        # The worker waited out the standby (refused until promoted), and looks again.
        before = cluster.scalar(GENERATION)
        wait_for(lambda: cluster.scalar(GENERATION) > before + 3, timeout=30, what="the worker's looks")
        assert worker.process.poll() is None, worker.output()
        assert holds(cluster) == []
        assert "restore detected" not in worker.output()


def test_a_failover_to_a_replica_that_lost_what_a_worker_saw_is_held(cluster: ThrowawayCluster) -> None:
    with streaming_replica(cluster) as (replica, worker):
        wait_for(lambda: replica.scalar(GENERATION) > 3, what="the replica to follow the worker's looks")
        replica.stop("fast")  # the replica falls behind: what the worker sees next, it never gets
        seen = cluster.scalar(GENERATION)
        wait_for(lambda: cluster.scalar(GENERATION) > seen + 5, what="more looks on the primary")
        cluster.stop("immediate")
        promote_at(replica, cluster.port)  # the lagging replica becomes the primary, same address
        wait_for(lambda: holds(cluster) == [("went_back", True)], timeout=30, what="the hold")
        wait_for(lambda: "restore detected (went_back)" in worker.output(), what="the worker's log line")


def promote_at(replica: ThrowawayCluster, port: int) -> None:
    """Serve the standby ``replica`` at ``port`` (where the workers connect, its primary gone)
    and promote it: it becomes the primary on a new timeline."""
    if replica.data.joinpath("postmaster.pid").exists():
        replica.stop("fast")
    with (replica.data / "postgresql.auto.conf").open("a") as conf:
        conf.write("primary_conninfo = ''\n")  # the old primary's address is its own now
    replica.port = port
    replica.url = f"postgres://postgres@127.0.0.1:{port}/jobs"
    replica.start()
    as_postgres(str(replica.bin / "pg_ctl"), "-D", str(replica.data), "-w", "promote")
