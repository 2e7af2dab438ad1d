"""Behind PgBouncer in transaction mode nothing of django_jobs outlives a transaction: no
prepared statement, no session setting (``statement_timeout``, ``jit``), no ``LISTEN`` is left
on a server connection for the pooler's next client, whether the project declares the pooler
(``DISABLE_SERVER_SIDE_CURSORS``, docs/scaling.md's recipe) or ``runjobs`` finds it.

What is left is read from every server connection of the pool at the end, each in a
transaction of its own held until all are read (``PgBouncer.server_sessions``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connections

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.runtime import listener
from django_jobs.runtime.listener import Listener
from django_jobs.runtime.pooler import Pooling
from django_jobs.states import JobStatus
from tests.factories import JobFactory
from tests.process.behind_pgbouncer.conftest import direct_url, pooled_url
from tests.process.pgbouncer import PgBouncer
from tests.process.workers import ROOT, StartWorker, WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ENDED = {JobStatus.COMPLETED, JobStatus.FAILED}


def run_a_mix(worker: WorkerProcess) -> None:
    """Jobs that take every write a worker makes: claims one by one (a prepared claim would
    fail on the next server connection), retries, a failure, checkpoints and progress, a job
    scheduled for later."""
    jobs = [enqueue("test.noop", {}) for _ in range(30)]
    jobs += [
        enqueue("test.flaky", {"succeed_on": 3}),
        enqueue("test.permanent", {}),
        enqueue("test.checkpointed", {"steps": 6, "pause": 0.02}),
        enqueue("test.noop", {}, delay=0.5),
    ]
    ids = [job.id for job in jobs]
    wait_for(
        lambda: set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) <= ENDED,
        timeout=30,
        what=f"the jobs to end; worker said: {worker.output()[-2000:]}",
    )
    statuses = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    assert [statuses[i] for i in ids].count(JobStatus.FAILED) == 1  # test.permanent, and only it
    assert Job.objects.get(id=jobs[30].id).attempts == 3


def stop(worker: WorkerProcess) -> str:
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
    return worker.output()


def assert_nothing_left_behind(bouncer: PgBouncer) -> None:
    with psycopg.connect(direct_url(bouncer)) as direct:
        row = direct.execute("SELECT current_setting('statement_timeout'), current_setting('jit')").fetchone()
    assert row is not None
    server_default = {"statement_timeout": row[0], "jit": row[1], "listening": "0", "prepared": "0"}
    sessions = bouncer.server_sessions(connections.settings["default"]["NAME"])
    left = [s for s in sessions if {k: s[k] for k in server_default} != server_default]
    assert left == [], f"left on pooled server connections (server default {server_default})"


def test_a_worker_of_the_recipe_leaves_nothing_on_the_pooled_server_connections(
    start_worker: StartWorker, bouncer: PgBouncer
) -> None:
    worker = start_worker("--concurrency", "2")
    run_a_mix(worker)
    output = stop(worker)
    assert "django_jobs.W00" not in output  # the recipe draws no warning
    assert_nothing_left_behind(bouncer)


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_worker_finds_a_pooler_its_settings_do_not_declare_and_works_through_it(
    start_worker: StartWorker, bouncer: PgBouncer, pool: str
) -> None:
    # No DISABLE_SERVER_SIDE_CURSORS, no LISTEN_DATABASE: what a project that just put
    # PgBouncer in front of its database runs. The process pool's children read the settings
    # afresh: the worker tells them what it found.
    undeclared = {"DATABASE_URL": pooled_url(bouncer, declared=False), "LISTEN_DATABASE_URL": ""}
    worker = start_worker("--concurrency", "2", "--pool", pool, env=undeclared)
    run_a_mix(worker)
    output = stop(worker)
    assert "(django_jobs.W004)" in output
    assert "not listening, polling every" in output
    assert_nothing_left_behind(bouncer)


def test_reapjobs_finds_the_pooler_too(worker_env: dict[str, str], bouncer: PgBouncer) -> None:
    lost = JobFactory(running_stale=True)  # what a pass of the loop's own thread takes back
    env = {**worker_env, "DATABASE_URL": pooled_url(bouncer, declared=False), "LISTEN_DATABASE_URL": ""}
    reaper = subprocess.Popen(
        [sys.executable, "manage.py", "reapjobs", "--loop", "--interval", "0.1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: Job.objects.get(id=lost.id).status != JobStatus.RUNNING, what="the recovery")
    finally:
        reaper.send_signal(signal.SIGTERM)
        output, _ = reaper.communicate(timeout=20)
    assert reaper.returncode == 0 and "reaper stopped after" in output, output
    assert "(django_jobs.W004)" in output and "django_jobs.W006" not in output
    assert_nothing_left_behind(bouncer)


@pytest.fixture
def ear() -> Iterator[Listener]:
    """A listener of this process, on its ``default`` alias (through the bouncer)."""
    stopping = threading.Event()
    heard = Listener([], wake=lambda: None, due_in=lambda seconds: None, stop=stopping)
    yield heard
    stopping.set()
    if heard.is_alive():
        heard.join(timeout=5)


def test_a_listener_on_an_alias_declared_pooled_does_not_listen(ear: Listener, bouncer: PgBouncer) -> None:
    ear.start()
    wait_for(ear.pooled.is_set, timeout=5, what="the listener to give up")
    ear.join(timeout=5)
    assert not ear.is_alive() and not ear.listening.is_set()
    assert_nothing_left_behind(bouncer)


def test_a_listener_whose_session_moves_to_another_server_gives_up(
    ear: Listener, bouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy pool may lend the detection's second client another server connection than the
    # first one's, and the pooler then passes for a session pool: the keepalive finds it out.
    monkeypatch.setitem(connections.settings["default"], "DISABLE_SERVER_SIDE_CURSORS", False)
    monkeypatch.setattr(listener, "pooling_of", lambda conn, params: Pooling.POOLER)
    monkeypatch.setattr(listener, "KEEPALIVE", 0.2)
    ear.start()
    wait_for(ear.listening.is_set, timeout=5, what="the listener to LISTEN")
    # Another client's transaction takes the server connection the LISTEN ran on (the pool lends
    # the one returned last), so the listener's next keepalive runs on another one.
    with psycopg.connect(pooled_url(bouncer, declared=False), prepare_threshold=None) as other:
        # What a client of the pool inherits: the listener's LISTEN, heard by nobody.
        assert other.execute("SELECT count(*) FROM pg_listening_channels()").fetchone() == (1,)
        wait_for(ear.pooled.is_set, timeout=5, what="the listener to find its session moved")
        other.execute("UNLISTEN *")  # the next tests' pool as it was
    ear.join(timeout=5)
    assert not ear.is_alive() and not ear.listening.is_set()
