"""``manage.py jobsselftest`` on a throwaway cluster, as a user runs it on theirs: it passes on a
healthy database and leaves nothing behind; it refuses, writing nothing, a queue holding other
jobs, a role that may not insert jobs, and a second run while one is under way; what ``--keep``
keeps, ``--clean`` removes.

The settings are the test project's own, without the environment's sub-second leases: its
workers would hold a lost job for a minute (LEASE_TIMEOUT 60), so each recovery measured in
seconds shows that the self-test ran its workers with its own lease.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIMITED_ROLE = "selftest_cannot_enqueue"
#: The tables a run writes; each must be as it was once it is done.
TABLES = ("django_jobs_job", "django_jobs_jobevent", "django_jobs_processedeffect", "django_jobs_liveworker")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        pg.migrate(environment(pg.url))
        with pg.connect() as conn:
            # A role that may do everything to the tables but add a job.
            conn.execute(f"CREATE ROLE {LIMITED_ROLE} LOGIN")
            conn.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {LIMITED_ROLE}"
            )
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {LIMITED_ROLE}")
            conn.execute(f"REVOKE INSERT ON django_jobs_job FROM {LIMITED_ROLE}")
        yield pg
    finally:
        pg.destroy()


def environment(url: str) -> dict[str, str]:
    """The test project's settings on ``url``, and nothing of the environment's overrides."""
    return {"DATABASE_URL": url, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}


def selftest(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "jobsselftest", *args],
        cwd=ROOT, env=environment(url), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def rows(pg: ThrowawayCluster) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a run writes."""
    with pg.connect() as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in TABLES}


def gone(pid: int) -> bool:
    """Whether no self-test worker runs as ``pid`` (the pid may be another process's by now)."""
    try:
        return b"jobsselftest" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def test_a_run_passes_leaves_nothing_behind_and_refuses_a_second_run_meanwhile(
    cluster: ThrowawayCluster,
) -> None:
    before = rows(cluster)
    with tempfile.NamedTemporaryFile("w+", suffix=".out") as out:
        first = subprocess.Popen(
            [sys.executable, "manage.py", "jobsselftest"],
            cwd=ROOT, env=environment(cluster.url), stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: "held by this run" in Path(out.name).read_text(), timeout=60, what="the queue held"
            )
            second = selftest(cluster.url)
            assert first.wait(timeout=120) == 0, Path(out.name).read_text()
        finally:
            if first.poll() is None:
                first.kill()
        output = Path(out.name).read_text()

    assert second.returncode == 2
    assert "refused: another self-test holds queue 'django_jobs_selftest'" in second.stderr
    for step in (
        r"started worker A \(pid \d+\) and worker B \(pid \d+\)",
        r"enqueued 300 jobs .*\n  all 300 completed in [\d.]+ s: [\d,]+ jobs/s",
        r"the 10 were retried once and completed on their second attempt",
        r"claim latency, idle workers \(20 jobs enqueued one at a time\): p50 \d+ ms, p95 \d+ ms",
        r"SIGKILL worker [AB] \(pid \d+\) while it ran job \d+",
        r"job \d+ recovered [\d.]+ s after the SIGKILL",
        r"ran it again and completed it .* its effect was not applied again",
        r"SIGSTOP worker [AB] .*\nstarted worker C",
        r"job \d+ recovered [\d.]+ s after the SIGSTOP",
        r"its late writes were refused: .*\(\d+ lease lost\); job \d+ is as worker C .* left it \(fenced\)",
        r"effects: 332 jobs, each applied once",
        r"removed 335 job\(s\), \d+ event\(s\), \d+ ledger key\(s\) and 1 live-worker row\(s\)",
        r"figures: claim latency .*; recovery .* after a SIGKILL, .* after a SIGSTOP \(lease 2 s\)",
        r"PASSED",
    ):
        assert re.search(step, output), f"{step!r} not in:\n{output}"
    # Recovered within seconds although the project's LEASE_TIMEOUT is a minute.
    recoveries = [float(s) for s in re.findall(r"recovered ([\d.]+) s after the SIG", output)]
    assert len(recoveries) == 2 and all(0 < s < 10 for s in recoveries), output
    assert rows(cluster) == before
    assert all(gone(int(pid)) for pid in re.findall(r"\(pid (\d+)\)", output))


def test_a_queue_holding_other_jobs_is_refused_and_left_as_it_was(cluster: ThrowawayCluster) -> None:
    with cluster.connect() as conn:
        conn.execute(
            "INSERT INTO django_jobs_job"
            " (queue, type, version, payload, status, priority, attempts, max_attempts)"
            " VALUES ('reports', 'test.noop', 1, '{}', 'pending', 0, 0, 5)"
        )
    try:
        before = rows(cluster)
        refused = selftest(cluster.url, "--queue", "reports")
        assert refused.returncode == 2
        assert "refused: queue 'reports' holds 1 job(s) that are not the self-test's" in refused.stderr
        assert refused.stdout == ""  # not one step taken
        assert rows(cluster) == before
    finally:
        with cluster.connect() as conn:
            conn.execute("DELETE FROM django_jobs_job WHERE queue = 'reports'")


def test_a_role_that_may_not_insert_jobs_is_told_so_and_nothing_is_written(cluster: ThrowawayCluster) -> None:
    before = rows(cluster)
    refused = selftest(cluster.url.replace("postgres@", f"{LIMITED_ROLE}@"))
    assert refused.returncode == 2
    assert f"refused: the database role '{LIMITED_ROLE}' lacks INSERT on django_jobs_job" in refused.stderr
    assert rows(cluster) == before


def test_what_a_kept_run_leaves_is_refused_until_clean_removes_it(cluster: ThrowawayCluster) -> None:
    before = rows(cluster)
    kept = selftest(cluster.url, "--keep", "--jobs", "20")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    run = re.search(r"kept run (\w+): (\d+) job\(s\) and (\d+) ledger key\(s\)", kept.stdout)
    assert run is not None and "--clean --queue django_jobs_selftest" in kept.stdout, kept.stdout
    with cluster.connect() as conn:
        jobs = conn.execute(
            "SELECT count(*) FROM django_jobs_job WHERE queue = 'django_jobs_selftest'"
        ).fetchone()
        keys = conn.execute(
            "SELECT count(*) FROM django_jobs_processedeffect WHERE key LIKE %s",
            [f"django_jobs.selftest:{run[1]}:%"],
        ).fetchone()
    assert (jobs, keys) == ((int(run[2]),), (int(run[3]),))

    refused = selftest(cluster.url)
    assert refused.returncode == 2 and f"an earlier self-test left (run {run[1]}" in refused.stderr

    cleaned = selftest(cluster.url, "--clean")
    assert cleaned.returncode == 0 and f"removed {run[2]} job(s)" in cleaned.stdout, cleaned.stdout
    assert rows(cluster) == before
