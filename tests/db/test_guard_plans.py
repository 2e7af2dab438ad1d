"""The statements that write a batch of running jobs look their jobs up, whatever the statistics
say (``django_jobs.transitions.guards``).

The table is set up as a busy queue's looks to the planner at its worst: ANALYZE ran when
nothing was running, and thousands of jobs run now (a worker whose outcomes piled up). Each
statement then writes a batch of a few dozen of them, with custom plans and with generic ones (a
prepared statement's, after its fifth run), and ``auto_explain`` reports the plan it ran: it must
read about as many rows of the job table as the batch names, never every running job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Beat, Expired, Outcome, Recovery

pytestmark = pytest.mark.django_db

FINISHED = 20_000
RUNNING = 5_000
BATCH = 50


def _execute(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def busy_table_with_stale_statistics() -> list[tuple[int, uuid.UUID]]:
    """``FINISHED`` completed jobs, analyzed; then ``RUNNING`` jobs the statistics never saw,
    the first ``BATCH`` of them with an expired lease. Returns the batch's executions."""
    _execute(
        "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
        " max_attempts, completed_at, finished_at, started_at)"
        " SELECT 'default', 'test.noop', 1, '{}', 'completed', 0, 1, 5, now(), now(), now()"
        " FROM generate_series(1, %s)",
        [FINISHED + RUNNING],
    )
    _execute("ANALYZE django_jobs_job")
    return [
        (row[0], row[1])
        for row in _execute(
            "UPDATE django_jobs_job SET status = 'running', execution_id = gen_random_uuid(),"
            " worker_id = 'host:1:abc', heartbeat_at = now(), completed_at = NULL,"
            " finished_at = NULL, lease_expires_at = now() + CASE WHEN n <= %s"
            "   THEN interval '-1 minute' ELSE interval '1 minute' END"
            " FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM django_jobs_job"
            "       ORDER BY id LIMIT %s) AS s"
            " WHERE django_jobs_job.id = s.id RETURNING django_jobs_job.id, execution_id, n",
            [BATCH, RUNNING],
        )
        if row[2] <= BATCH
    ]


@pytest.fixture(params=["force_custom_plan", "force_generic_plan"])
def plans(request: pytest.FixtureRequest) -> Iterator[list[dict[str, Any]]]:
    """The plans of the statements run on the jobs connection, as ``auto_explain`` reports them
    (to the client, as notices), under the plan cache mode of the parameter."""
    connection = connections[jobs_settings.DATABASE]
    connection.ensure_connection()
    if not _execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0][0]:
        pytest.skip("auto_explain is loaded by a superuser only")
    if not _execute(
        "SELECT (pg_stat_file(setting || '/auto_explain.so', true)).size IS NOT NULL"
        " FROM pg_config WHERE name = 'PKGLIBDIR'"
    )[0][0]:
        # PyPI's pgserver (the PostgreSQL 16 of ./run test-pg-versions) ships no contrib module.
        pytest.skip("auto_explain is not installed with this server")
    found: list[dict[str, Any]] = []

    def keep(diagnostic: Any) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            found.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    for statement in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_format = json",
        "SET auto_explain.log_level = notice",
        "SET client_min_messages = notice",
        f"SET plan_cache_mode = {request.param}",
    ):
        _execute(statement)
    connection.connection.add_notice_handler(keep)
    try:
        yield found
    finally:
        connection.connection.remove_notice_handler(keep)
        for setting in ("auto_explain.log_min_duration", "client_min_messages", "plan_cache_mode"):
            _execute(f"RESET {setting}")


def rows_read(plan: dict[str, Any], table: str = "django_jobs_job") -> int:
    """How many rows the plan's scans of ``table`` read, kept or filtered out, in all loops."""
    read = 0
    if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
        per_loop = (
            plan["Actual Rows"]
            + plan.get("Rows Removed by Filter", 0)
            + plan.get("Rows Removed by Index Recheck", 0)
        )
        read += int(per_loop * plan["Actual Loops"])
    return read + sum(rows_read(child, table) for child in plan.get("Plans", []))


def writes(plan: dict[str, Any]) -> bool:
    return plan["Node Type"] == "ModifyTable" or any(writes(child) for child in plan.get("Plans", []))


def _written(
    plans: list[dict[str, Any]], write: Callable[[], object], *, writes_only: bool = False
) -> tuple[object, int]:
    """What ``write`` returned, and the most rows of the job table one of its statements read
    (of its statements that write, with ``writes_only``)."""
    plans.clear()
    result = write()
    # A query's plan is reported when its portal closes, at the next statement.
    _execute("SELECT 1")
    touching = [rows_read(plan) for plan in plans if writes(plan) or not writes_only]
    assert touching, "auto_explain reported no statement"
    return result, max(touching)


def _outcome(job_id: int, execution_id: uuid.UUID, status: str, event: str | None = None) -> Outcome:
    return Outcome(job_id, execution_id, status, event=event, error_code="UNKNOWN" if event else None)


def test_a_batch_of_successes_reads_its_own_rows(busy_table_with_stale_statistics, plans) -> None:
    batch = busy_table_with_stale_statistics
    for start in range(0, BATCH, 10):  # past the fifth run: the prepared statement goes generic
        part = batch[start : start + 10]
        written, read = _written(
            plans,
            lambda part=part: transitions.write_outcomes([_outcome(*e, JobStatus.COMPLETED) for e in part]),
        )
        assert written == {job_id for job_id, _ in part}
        assert read <= 2 * len(part), f"read {read} rows of the job table to write {len(part)}"


def test_a_batch_of_failures_and_retries_reads_its_own_rows(busy_table_with_stale_statistics, plans) -> None:
    batch = busy_table_with_stale_statistics
    outcomes = [
        _outcome(*e, JobStatus.FAILED, EventKind.FAILED)
        if n % 2
        else _outcome(*e, JobStatus.PENDING, EventKind.RETRY_SCHEDULED)
        for n, e in enumerate(batch)
    ]
    written, read = _written(plans, lambda: transitions.write_outcomes(outcomes))
    assert written == {job_id for job_id, _ in batch}
    assert read <= 2 * BATCH, f"read {read} rows of the job table to write {BATCH}"


def test_a_heartbeat_reads_its_own_rows(busy_table_with_stale_statistics, plans) -> None:
    batch = busy_table_with_stale_statistics
    beats = [Beat(job_id, execution_id, 60.0) for job_id, execution_id in batch]
    owned, read = _written(plans, lambda: transitions.heartbeat(beats))
    assert owned == {job_id: False for job_id, _ in batch}
    assert read <= 2 * BATCH, f"read {read} rows of the job table to beat for {BATCH}"


def test_cutting_leases_and_reading_cancel_requests_read_their_own_rows(
    busy_table_with_stale_statistics, plans
) -> None:
    batch = busy_table_with_stale_statistics
    cut, read = _written(plans, lambda: transitions.cut_leases(batch, 5.0))
    assert cut == BATCH
    assert read <= 2 * BATCH, f"read {read} rows of the job table to cut {BATCH} leases"
    requested, read = _written(
        plans, lambda: transitions.cancel_requested_among([job_id for job_id, _ in batch])
    )
    assert requested == set()
    assert read <= 2 * BATCH, f"read {read} rows of the job table to look at {BATCH} jobs"


def test_a_recovery_writes_reading_the_expired_rows_only(busy_table_with_stale_statistics, plans) -> None:
    # The read that finds expired leases before (status = 'running', lease_expires_at < now()) is
    # left to the planner: it has the django_jobs_running index to walk in lease order, and with
    # these statistics it may read the running jobs through django_jobs_status instead; that read
    # grows with the jobs running, not with a batch times them.

    def retry(expired: Expired) -> Recovery:
        return Recovery(expired, JobStatus.PENDING, EventKind.RECOVERED, expired.attempts, "LEASE_EXPIRED")

    recovered, read = _written(
        plans, lambda: transitions.recover_expired(retry, limit=BATCH), writes_only=True
    )
    assert {r.expired.id for r in recovered} == {job_id for job_id, _ in busy_table_with_stale_statistics}
    assert read <= 2 * BATCH, f"read {read} rows of the job table to recover {BATCH} jobs"
