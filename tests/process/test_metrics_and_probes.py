"""A real worker's metrics port and health file: what a scrape reads after a mixed workload,
and how the probes turn when the worker is stuck or loses its database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_jobs import enqueue
from django_jobs.conf import DEFAULTS
from django_jobs.console import restore_holds
from django_jobs.models import Job
from django_jobs.observe.liveness import HELD
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.process.probes import get, metrics_port, scrape
from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import ROOT, StartWorker, WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def labels(type_name: str, code: str | None = None) -> tuple[tuple[str, str], ...]:
    pairs = {"queue": "default", "type": type_name, **({"code": code} if code else {})}
    return tuple(sorted(pairs.items()))


def test_a_scrape_after_a_mixed_workload_counts_each_outcome_by_type_and_code(
    start_worker: StartWorker,
) -> None:
    for _ in range(3):
        enqueue("test.noop", {})
    flaky = enqueue("test.flaky", {"succeed_on": 3})  # two retries, then done
    enqueue("test.permanent", {})
    enqueue("test.cancel_then_fail", {})
    worker = start_worker("--concurrency", "2", "--metrics-port", "0")
    port = metrics_port(worker)

    unsettled = Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
    wait_for(lambda: not unsettled.exists(), what="every job to settle")
    assert Job.objects.get(id=flaky.id).attempts == 3
    expected = {
        ("django_jobs_started_total", labels("test.noop")): 3,
        ("django_jobs_completed_total", labels("test.noop")): 3,
        ("django_jobs_started_total", labels("test.flaky")): 3,
        ("django_jobs_retried_total", labels("test.flaky", "PROVIDER_5XX")): 2,
        ("django_jobs_completed_total", labels("test.flaky")): 1,
        ("django_jobs_failed_total", labels("test.permanent", "ENTITY_NOT_FOUND")): 1,
        ("django_jobs_completed_total", labels("test.permanent")): 0,
        ("django_jobs_cancelled_total", labels("test.cancel_then_fail")): 1,
        ("django_jobs_run_seconds_count", labels("test.noop")): 3,
        ("django_jobs_run_seconds_count", labels("test.flaky")): 3,
        ("django_jobs_queue_wait_seconds_count", labels("test.flaky")): 3,
        ("django_jobs_lost_total", labels("test.noop")): 0,
    }

    def counted() -> bool:
        got = scrape(port)
        return all(got.get(key) == value for key, value in expected.items())

    wait_for(counted, timeout=10, what="the counters to reach the workload's outcomes")
    got = scrape(port)
    assert not [key for key in got if key[0] == "django_jobs_failed_total" and "test.flaky" in str(key)]
    assert got[("django_jobs_worker_live", ())] == 1
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ok\n")
    assert get(port, "/nope")[0] == 404


def test_a_worker_held_by_a_restore_hold_stays_ready_and_says_so(start_worker: StartWorker) -> None:
    held = enqueue("test.unsafe", {})  # its type acts outside the database
    hold = restore_holds.declare(actor="ops", reason="restored last night's backup")
    worker = start_worker("--metrics-port", "0")
    port = metrics_port(worker)
    wait_for(lambda: get(port, "/readyz") == (200, f"ok\n{HELD}\n"), what="the worker to be ready, held")
    assert scrape(port)[("django_jobs_worker_restore_held", ())] == 1
    assert Job.objects.get(id=held.id).status == JobStatus.PENDING
    restore_holds.release(actor="ops", reason="checked", hold_id=hold)
    # At its next heartbeat report the worker sees the release.
    wait_for(lambda: get(port, "/readyz") == (200, "ok\n"), timeout=30, what="the hold to be released")
    assert scrape(port)[("django_jobs_worker_restore_held", ())] == 0


TOKEN = "worker-port-token-5b8e2d17c4"


def test_with_a_token_set_the_worker_port_serves_metrics_only_to_a_scrape_that_presents_it(
    start_worker: StartWorker,
) -> None:
    enqueue("test.noop", {})
    worker = start_worker("--metrics-port", "0", env={"DJANGO_JOBS_METRICS_TOKEN": TOKEN})
    port = metrics_port(worker)
    wait_for(lambda: not Job.objects.filter(status=JobStatus.PENDING).exists(), what="the job to run")
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": f"Basic {TOKEN}"}):
        status, body = get(port, "/metrics", headers)
        assert (status, body) == (401, "a bearer token is required\n"), headers
    wait_for(lambda: scrape(port, TOKEN).get(("django_jobs_started_total", labels("test.noop"))) == 1,
             what="the scrape with the token to count the job")  # fmt: skip
    # The probes need none: a kubelet's probe sends no token, and they only say how it is.
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ok\n")
    assert TOKEN not in worker.output()


def test_the_worker_port_listens_on_loopback_unless_told_and_warns_when_open_without_a_token(
    start_worker: StartWorker,
) -> None:
    local = start_worker("--metrics-port", "0")
    metrics_port(local)
    assert "metrics and probes on http://127.0.0.1:" in local.output()
    assert "serves without a token" not in local.output()
    everywhere = start_worker("--metrics-port", "0", "--metrics-host", "0.0.0.0")
    metrics_port(everywhere)
    assert "metrics port 0.0.0.0:" in everywhere.output()
    assert "serves without a token" in everywhere.output()
    guarded = start_worker(
        "--metrics-port", "0", "--metrics-host", "0.0.0.0", env={"DJANGO_JOBS_METRICS_TOKEN": TOKEN}
    )
    metrics_port(guarded)
    assert "serves without a token" not in guarded.output()


def test_error_codes_that_name_each_job_fold_into_other_past_the_cap(start_worker: StartWorker) -> None:
    cap = 100  # the documented default of METRICS_MAX_LABEL_VALUES, checked last
    jobs = [enqueue("test.coded_by_id", {}) for _ in range(cap + 5)]
    worker = start_worker("--concurrency", "4", "--metrics-port", "0")
    port = metrics_port(worker)
    failed = Job.objects.filter(id__in=[job.id for job in jobs], status=JobStatus.FAILED)
    wait_for(lambda: failed.count() == len(jobs), what="every job to fail")

    def codes() -> dict[str, float]:
        return {
            dict(key[1])["code"]: value
            for key, value in scrape(port).items()
            if key[0] == "django_jobs_failed_total" and dict(key[1])["type"] == "test.coded_by_id"
        }

    wait_for(lambda: sum(codes().values()) == len(jobs), timeout=10, what="every failure to be counted")
    counted = codes()
    assert len(counted) == cap + 1  # the first `cap` codes, and "other"
    assert counted["other"] == 5
    assert set(counted) - {"other"} <= {f"ORDER_{job.id}_NOT_FOUND" for job in jobs}
    assert DEFAULTS["METRICS_MAX_LABEL_VALUES"] == cap


def age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


@pytest.mark.slow
def test_a_worker_whose_only_thread_is_stuck_turns_unhealthy_then_healthy_again(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    alive = tmp_path / "alive"
    worker = start_worker(
        "--concurrency", "1", "--metrics-port", "0", "--health-file", str(alive), "--no-reaper",
    )  # fmt: skip
    port = metrics_port(worker)
    wait_for(lambda: alive.exists() and age(alive) < 1.5, what="the health file to be touched")
    assert get(port, "/healthz") == (200, "ok\n")

    # Ignores its 0.3 s deadline for 4 s; it is declared stuck one second past the deadline.
    stuck = enqueue("test.hung", {"seconds": 4}, max_attempts=1)
    started = time.monotonic()
    wait_for(lambda: get(port, "/healthz")[0] == 503, timeout=5, what="/healthz to turn 503")
    assert time.monotonic() - started < 4
    status, reasons = get(port, "/healthz")
    assert "1 execution(s) stuck past their deadline, with 1 slot(s)" in reasons, (status, reasons)
    assert scrape(port)[("django_jobs_worker_live", ())] == 0
    time.sleep(2)  # the file is left to age while the worker is unhealthy
    assert age(alive) > 1.5 and get(port, "/healthz")[0] == 503
    assert "worker unhealthy, health file left to age" in worker.output()

    # The handler returns: its thread is free, the worker is healthy again.
    wait_for(lambda: get(port, "/healthz") == (200, "ok\n"), timeout=10, what="/healthz to recover")
    wait_for(lambda: age(alive) < 1.5, timeout=5, what="the health file to be touched again")
    # No reaper took it back: the late outcome of the stuck execution still owns the job.
    wait_for(lambda: Job.objects.get(id=stuck.id).status == JobStatus.COMPLETED, what="the late outcome")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.fixture
def cluster() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        yield pg
    finally:
        pg.destroy()


@pytest.mark.slow
def test_a_worker_that_lost_its_database_is_not_ready_until_it_returns(cluster: ThrowawayCluster) -> None:
    env = {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    cluster.migrate(env)
    worker = WorkerProcess(env, "--metrics-port", "0")
    try:
        port = metrics_port(worker)
        wait_for(lambda: get(port, "/readyz") == (200, "ok\n"), what="the worker to be ready")

        cluster.stop("immediate")
        wait_for(lambda: get(port, "/readyz")[0] == 503, timeout=10, what="/readyz to turn 503")
        assert "the database is unreachable" in get(port, "/readyz")[1]
        # Within LIVENESS_OUTAGE_LIMIT: not ready, but alive (a restart would not bring it back).
        assert get(port, "/healthz") == (200, "ok\n")
        assert worker.process.poll() is None

        cluster.start()
        wait_for(lambda: get(port, "/readyz") == (200, "ok\n"), timeout=30, what="/readyz to recover")
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        worker.stop()


# ---- hostile input ------------------------------------------------------------------------------


def runjobs(worker_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "runjobs", "--burst", *args], cwd=ROOT, env=worker_env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("port", ["70000", "-1", "http", "9300.5", ""])
def test_a_bad_port_is_a_usage_error(worker_env: dict[str, str], port: str) -> None:
    result = runjobs(worker_env, "--metrics-port", port)
    assert result.returncode == 2
    assert "--metrics-port" in result.stderr and "is not a port number" in result.stderr


def test_a_port_in_use_is_a_clear_error_before_any_work(worker_env: dict[str, str]) -> None:
    job = enqueue("test.noop", {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runjobs(worker_env, "--metrics-host", "127.0.0.1", "--metrics-port", str(port))
    assert result.returncode == 1
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING  # refused before any claim


def test_a_health_file_in_a_missing_directory_is_a_clear_error(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    result = runjobs(worker_env, "--health-file", str(tmp_path / "missing" / "alive"))
    assert result.returncode == 1
    assert (
        f"--health-file: cannot write the health file {tmp_path}/missing/alive: no directory" in result.stderr
    )
    result = runjobs(worker_env, "--health-file", str(tmp_path))
    assert result.returncode == 1 and "it is a directory" in result.stderr


def test_metrics_without_prometheus_client_is_a_clear_error(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    # A prometheus_client that cannot be imported stands for the extra not installed.
    (tmp_path / "prometheus_client").mkdir()
    (tmp_path / "prometheus_client" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**worker_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = runjobs(env, "--metrics-port", "0")
    assert result.returncode == 1
    assert "--metrics-port needs prometheus-client: pip install 'django-jobs-pg[prometheus]'" in result.stderr
    assert runjobs(env).returncode == 0  # a worker without metrics runs without it


@pytest.mark.slow
def test_the_reaper_of_a_worker_counts_the_jobs_it_recovered_from_a_killed_one(
    start_worker: StartWorker,
) -> None:
    job = enqueue("test.long", {"seconds": 30})
    victim = start_worker("--no-reaper")
    started = BusinessRow.objects.filter(key__startswith=f"started:{job.id}:")
    wait_for(started.exists, what="the job to start")
    victim.kill()  # its lease (1 s) runs out; the other worker's reaper takes the job back

    rescuer = start_worker("--metrics-port", "0", "--queue", "elsewhere")  # runs none of it
    port = metrics_port(rescuer)
    recovered = ("django_jobs_recovered_total", (("status", "pending"), ("type", "test.long")))
    wait_for(lambda: scrape(port).get(recovered) == 1, what="the recovery to be counted")
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING
