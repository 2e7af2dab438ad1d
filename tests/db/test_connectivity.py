"""The worker's connections notice a dead or stuck database, and a worker whose heartbeat goes
unanswered starts nothing until it is answered again (django_jobs/runtime/connectivity.py)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.test import override_settings

from django_jobs import enqueue
from django_jobs.models import Job
from django_jobs.runtime.connectivity import (
    apply_connection_options,
    connection_options,
    run_worker_statements,
)
from django_jobs.states import JobStatus
from testproject.testjobs.models import BusinessRow
from tests.db.inprocess import BackgroundWorker, run_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SHORT_LEASES = {
    "LEASE_TIMEOUT": 1.0,
    "HEARTBEAT_INTERVAL": 0.1,
    "REAPER_INTERVAL": 0.1,
    "POLL_INTERVAL": 0.02,
}


@pytest.fixture
def restored_options() -> Iterator[None]:
    """apply_connection_options() changes the process's DATABASES: put them back."""
    saved = {alias: copy.deepcopy(connections.settings[alias].get("OPTIONS", {})) for alias in connections}
    try:
        yield
    finally:
        for alias, options in saved.items():
            connections.settings[alias]["OPTIONS"] = options


def _on_new_thread(function: Callable[[], Any]) -> Any:
    """``function``'s result, run on a thread of its own (a fresh Django connection)."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(function())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    return result[0]


def _parameters() -> dict[str, str]:
    connection.ensure_connection()
    return dict(connection.connection.info.get_parameters())


def _statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return str(cursor.fetchone()[0])


def test_defaults_give_up_on_a_dead_peer_within_seconds() -> None:
    assert connection_options() == {
        "connect_timeout": 5,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,  # libpq counts it in milliseconds
    }


@override_settings(
    DJANGO_JOBS={"TCP_KEEPALIVES_IDLE": 0.2, "TCP_USER_TIMEOUT": None, "CONNECT_TIMEOUT": None}
)
def test_short_settings_round_up_and_none_leaves_the_default() -> None:
    # 0 would mean "the system default" to libpq: a short setting must never turn into that.
    assert connection_options() == {
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 2,
        "keepalives_count": 3,
    }


def test_worker_connections_carry_the_options_and_the_users_own_win(restored_options: None) -> None:
    connections.settings["default"].setdefault("OPTIONS", {})["keepalives_idle"] = 7
    apply_connection_options()
    parameters = _on_new_thread(_parameters)
    assert parameters["keepalives_idle"] == "7"  # DATABASES said so
    assert parameters["keepalives_count"] == "3"
    assert parameters["tcp_user_timeout"] == "10000"
    assert parameters["connect_timeout"] == "5"
    assert parameters["target_session_attrs"] == "read-write"  # a standby is refused, not written to


def test_only_the_jobs_database_refuses_a_standby(restored_options: None) -> None:
    connections.settings["reads_replica"] = {**connections.settings["default"], "OPTIONS": {}}
    try:
        apply_connection_options()
        assert connections.settings["default"]["OPTIONS"]["target_session_attrs"] == "read-write"
        assert (
            "target_session_attrs" not in connections.settings["reads_replica"]["OPTIONS"]
        )  # a replica, say
        assert connections.settings["reads_replica"]["OPTIONS"]["keepalives"] == 1
    finally:
        del connections.settings["reads_replica"]


def test_statement_timeout_bounds_only_the_workers_own_threads() -> None:
    def marked() -> str:
        run_worker_statements()
        return _statement_timeout()

    assert _on_new_thread(marked) == "30s"
    assert _on_new_thread(_statement_timeout) == "0"


def _jit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        return str(cursor.fetchone()[0])


def test_the_workers_own_connections_never_compile_their_statements() -> None:
    # A claim on a table of millions is estimated costly enough for JIT compilation, which
    # takes longer than the claim: the worker's connections turn it off, a handler's keep it.
    def marked() -> str:
        run_worker_statements()
        return _jit()

    assert _on_new_thread(marked) == "off"
    assert _on_new_thread(_jit) == _server_jit()


def _server_jit() -> str:
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"]
    ) as conn:
        row = conn.execute("SHOW jit").fetchone()
    assert row is not None
    return str(row[0])


def test_a_handlers_connection_has_no_statement_timeout() -> None:
    job = enqueue("test.statement_timeout", {})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.return_value) == (JobStatus.COMPLETED, "0")


class RowLock:
    """A second connection holding a job's row lock: every write to that row waits for it."""

    def __init__(self, job_id: int) -> None:
        settings = connection.settings_dict
        self.conn = psycopg.connect(
            dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"]
        )
        self.conn.execute("SELECT 1 FROM django_jobs_job WHERE id = %s FOR UPDATE", [job_id])

    def waiters(self) -> int:
        """Sessions waiting for this connection's locks."""
        with psycopg.connect(self.conn.info.dsn, autocommit=True) as other:
            row = other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                [self.conn.info.backend_pid],
            ).fetchone()
        return int(row[0]) if row else 0

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def _started(label: str) -> bool:
    return BusinessRow.objects.filter(key__startswith=f"{label}:").exists()


@override_settings(DJANGO_JOBS=SHORT_LEASES)
def test_worker_whose_heartbeat_is_unanswered_starts_no_job_until_it_is() -> None:
    long_job = enqueue("test.long", {"seconds": 4})
    with BackgroundWorker(concurrency=2) as worker:
        wait_for(lambda: _started("started"))
        lock = RowLock(long_job.id)
        try:
            wait_for(lambda: lock.waiters() > 0)  # the heartbeat waits for the row
            wait_for(lambda: worker.holding_back, timeout=5)  # ... longer than the lease
            waiting = enqueue("test.record", {"key": "after"})
            turns = worker.stats.held_back
            # A free slot, a claimable job: the claim loop looks at it twice and declines.
            wait_for(lambda: worker.stats.held_back >= turns + 2, timeout=5)
            assert Job.objects.get(id=waiting.id).status == JobStatus.PENDING
            assert not BusinessRow.objects.filter(key="after").exists()
        finally:
            lock.release()
        wait_for(lambda: BusinessRow.objects.filter(key="after").exists(), timeout=10)
        assert not worker.holding_back


@override_settings(DJANGO_JOBS={**SHORT_LEASES, "STATEMENT_TIMEOUT": 0.3})
def test_a_heartbeat_held_up_by_a_lock_is_cancelled_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    long_job = enqueue("test.long", {"seconds": 3})
    with BackgroundWorker(concurrency=1):
        wait_for(lambda: _started("started"))
        lock = RowLock(long_job.id)
        try:
            # Without a timeout, the beat would wait for the lock as long as it is held.
            wait_for(lambda: "heartbeat failed, retrying: OperationalError" in caplog.text, timeout=5)
        finally:
            lock.release()
        wait_for(lambda: Job.objects.get(id=long_job.id).status == JobStatus.COMPLETED, timeout=10)
