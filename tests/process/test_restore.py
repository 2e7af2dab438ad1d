"""Real restores on throwaway clusters, real `runjobs` processes, a provider outside the database
that records every call by idempotency key (a file: a restore cannot take a line back, as it
cannot take back a charge).

The story of each restore test: jobs ran before the backup; after it, more ran (their calls are
in the provider's record, their ends lost with the restore); others, pending at the backup, never
ran. After the restore the workers hold the jobs of external types; the operator releases the
hold; then every call happened exactly once: the jobs whose call the provider knows complete by
reconcile, those it does not know run once, and those whose type cannot ask are parked for review.
Told for a point-in-time recovery, a base backup brought up as a new cluster, a dump restored into
a re-created database, and a restore no worker can see, declared by the operator.

And nothing is held without cause: a restart and a failover to a replica that had every commit
hold nothing; a failover to a replica that lost commits a running worker saw is held.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import WorkerProcess, wait_for

pytestmark = pytest.mark.slow

# As enqueue() writes them, with the type's policy for a lost execution on the row.
ENQUEUE = """
INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts, max_attempts, on_lost)
SELECT %(queue)s, %(type)s, 1,
       jsonb_build_object('record', %(record)s::text, 'operation', %(prefix)s || '-' || g),
       'pending', 0, 0, 5, %(on_lost)s
FROM generate_series(1, %(n)s) g
"""
COUNT = "SELECT count(*) FROM django_jobs_job WHERE type = '{}' AND status = '{}'"
GENERATION = "SELECT coalesce(max(generation), 0) FROM django_jobs_databaseidentity"
ARCHIVED = "SELECT failed_count = 0 AND last_archived_wal IS NOT NULL FROM pg_stat_archiver"
RECONCILED = (
    "SELECT j.payload->>'operation' FROM django_jobs_job j JOIN django_jobs_jobevent e ON e.job_id = j.id"
    " WHERE e.kind = 'reconciled' ORDER BY 1"
)
ROOT = Path(__file__).resolve().parents[2]
#: `test.provider_charge` can ask the provider (reconcile); `test.provider_notice` cannot.
CHARGE, NOTICE = "test.provider_charge", "test.provider_notice"


def as_postgres(*args: str) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)


def env_of(cluster: ThrowawayCluster) -> dict[str, str]:
    return {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}


def burst(cluster: ThrowawayCluster, *args: str) -> str:
    """Run one `runjobs --burst` to its end; its log."""
    worker = WorkerProcess(env_of(cluster), "--burst", *args)
    try:
        assert worker.wait(timeout=60) == 0, worker.output()
        return worker.output()
    finally:
        worker.stop()


def jobsrestore(cluster: ThrowawayCluster, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "jobsrestore", *args],
        cwd=ROOT, env=env_of(cluster), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


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


@dataclass
class Provider:
    """The provider's record of calls, one idempotency key per line."""

    record: Path

    def enqueue(
        self, cluster: ThrowawayCluster, prefix: str, n: int, type_: str = CHARGE, queue: str = "default"
    ) -> None:
        on_lost = "reconcile" if type_ == CHARGE else "retry"
        params = {
            "queue": queue,
            "type": type_,
            "record": str(self.record),
            "prefix": prefix,
            "n": n,
            "on_lost": on_lost,
        }
        with cluster.connect() as conn:
            conn.execute(ENQUEUE, params)

    def calls(self) -> collections.Counter[str]:
        if not self.record.exists():
            return collections.Counter()
        return collections.Counter(self.record.read_text().splitlines())


def calls_of(type_: str, prefix: str, n: int) -> dict[str, int]:
    return {f"{type_}:{prefix}-{i}": 1 for i in range(1, n + 1)}


@pytest.fixture
def provider(tmp_path: Path) -> Provider:
    return Provider(tmp_path / "calls")


def up_to_the_backup(cluster: ThrowawayCluster, provider: Provider) -> None:
    burst(cluster)  # a worker has looked: the database's identity is recorded
    provider.enqueue(cluster, "before", 3)
    burst(cluster)  # ran before the backup: completed in it
    provider.enqueue(cluster, "after", 3)  # to run after the backup
    provider.enqueue(cluster, "notice", 2, NOTICE)  # the same, of a type that cannot ask
    provider.enqueue(
        cluster, "never", 2, queue="later"
    )  # pending at the backup, never run before the restore


def after_the_backup(cluster: ThrowawayCluster, provider: Provider) -> None:
    burst(cluster, "--queue", "default")
    assert provider.calls() == {
        **calls_of(CHARGE, "before", 3),
        **calls_of(CHARGE, "after", 3),
        **calls_of(NOTICE, "notice", 2),
    }


def held_then_settled_once(cluster: ThrowawayCluster, provider: Provider, kind: str) -> None:
    """After the restore: the workers hold the jobs of external types; released, every call
    happened exactly once."""
    log = burst(cluster)
    if kind != "declared":
        assert f"restore detected ({kind})" in log
    assert holds(cluster) == [(kind, True)]
    assert (
        cluster.scalar(COUNT.format(CHARGE, "pending")),
        cluster.scalar(COUNT.format(NOTICE, "pending")),
    ) == (5, 2)
    assert cluster.scalar(COUNT.format(CHARGE, "completed")) == 3  # completed at the backup: stay so

    released = jobsrestore(cluster, "release", "--reason", "asked the providers", "--actor", "ops")
    assert "5 ask their provider" in released and "2 were parked for review" in released, released
    burst(cluster)

    expected = {
        **calls_of(CHARGE, "before", 3),
        **calls_of(CHARGE, "after", 3),
        **calls_of(NOTICE, "notice", 2),
        **calls_of(CHARGE, "never", 2),
    }
    assert provider.calls() == expected  # each call exactly once, none repeated, none missing
    assert cluster.scalar(COUNT.format(CHARGE, "completed")) == 8
    with cluster.connect() as conn:
        reconciled = [row[0] for row in conn.execute(RECONCILED).fetchall()]
    assert reconciled == ["after-1", "after-2", "after-3"]  # completed without a second call
    assert (
        cluster.scalar(
            f"SELECT count(*) FROM django_jobs_job WHERE type = '{NOTICE}' AND status = 'needs_review'"
            " AND last_error_code = 'RESTORED'"
        )
        == 2
    )
    assert holds(cluster) == [(kind, False)]


def test_a_point_in_time_recovery(cluster: ThrowawayCluster, provider: Provider) -> None:
    up_to_the_backup(cluster, provider)
    backup = cluster.dir / "base"
    as_postgres(
        str(cluster.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
        "-D", str(backup), "-X", "stream", "-c", "fast",
    )  # fmt: skip
    with cluster.connect() as conn:
        conn.execute("SELECT pg_create_restore_point('before_the_runs')")
    after_the_backup(cluster, provider)
    archive_all(cluster)
    cluster.stop()

    # Recover the base backup to the restore point: PostgreSQL promotes it onto a new timeline.
    shutil.rmtree(cluster.data)
    as_postgres("cp", "-a", str(backup), str(cluster.data))
    recover(cluster, cluster.dir / "archive", "recovery_target_name = 'before_the_runs'")
    held_then_settled_once(cluster, provider, "new_timeline")


def test_a_base_backup_brought_up_as_a_new_cluster(cluster: ThrowawayCluster, provider: Provider) -> None:
    up_to_the_backup(cluster, provider)
    restored = ThrowawayCluster()
    owned(restored.dir)
    try:
        as_postgres(
            str(cluster.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
            "-D", str(restored.data), "-X", "stream", "-c", "fast",
        )  # fmt: skip
        after_the_backup(cluster, provider)
        archive_all(cluster)
        cluster.stop()  # the old server is gone; the backup is brought up elsewhere, as it was
        recover(restored, cluster.dir / "archive", "recovery_target = 'immediate'")
        held_then_settled_once(restored, provider, "new_timeline")
    finally:
        restored.destroy()


def test_a_dump_restored_into_a_recreated_database(cluster: ThrowawayCluster, provider: Provider) -> None:
    up_to_the_backup(cluster, provider)
    dump = cluster.dir / "jobs.dump"
    subprocess.run(
        ["pg_dump", "-Fc", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-f", str(dump),
         "jobs"],
        check=True, timeout=120,
    )  # fmt: skip
    after_the_backup(cluster, provider)
    with psycopg.connect(f"postgres://postgres@127.0.0.1:{cluster.port}/postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE jobs")
        conn.execute("CREATE DATABASE jobs")
    subprocess.run(
        ["pg_restore", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres", "-d", "jobs", str(dump)],
        check=True, timeout=120,
    )  # fmt: skip
    held_then_settled_once(cluster, provider, "recreated")


def test_a_restore_no_worker_can_see_declared_by_the_operator(
    cluster: ThrowawayCluster, provider: Provider
) -> None:
    """A copy of the data directory, taken while the server was stopped and put back the same
    way: the same cluster, database and timeline, and no worker ran across it."""
    up_to_the_backup(cluster, provider)
    cluster.stop()
    copy = cluster.dir / "copy"
    as_postgres("cp", "-a", str(cluster.data), str(copy))
    cluster.start()
    after_the_backup(cluster, provider)
    cluster.stop()
    shutil.rmtree(cluster.data)
    as_postgres("cp", "-a", str(copy), str(cluster.data))
    cluster.start()

    status = jobsrestore(cluster, "status").splitlines()
    assert "restore hold: none open" in status
    # Nothing a starting worker could see either: the database is as recorded, timeline included.
    now = next(line for line in status if line.startswith("this database now: "))
    recorded = next(line for line in status if line.startswith("recorded: "))
    assert recorded.startswith(f"recorded: {now.removeprefix('this database now: ')}, generation"), status
    assert "declared" in jobsrestore(
        cluster, "declare", "--reason", "put back last night's copy", "--actor", "ops"
    )
    held_then_settled_once(cluster, provider, "declared")


def archive_all(cluster: ThrowawayCluster) -> None:
    """Switch to a new WAL segment and wait until every finished one is archived."""
    with cluster.connect() as conn:
        conn.execute("SELECT pg_switch_wal()")
        wait_for(lambda: conn.execute(ARCHIVED).fetchone()[0], what="the WAL to be archived")


def recover(cluster: ThrowawayCluster, archive: Path, target: str) -> None:
    """Start ``cluster`` (a base backup in its data directory) in archive recovery to ``target``,
    promoted at the end: a new timeline, as PostgreSQL's documented restore does."""
    with (cluster.data / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"restore_command = 'cp {archive}/%f %p'\n{target}\nrecovery_target_action = 'promote'\n")
    owned(cluster.data / "postgresql.auto.conf")
    signal = cluster.data / "recovery.signal"
    signal.touch()
    owned(signal)
    cluster.start()
    wait_for(lambda: cluster.scalar("SELECT (NOT pg_is_in_recovery())::int") == 1, what="the promotion")


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
