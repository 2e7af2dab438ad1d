"""The outlook: what an idle worker reads instead of relying on notifications (the next due time
among the jobs it could claim, and the paused queues), and what it costs."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_jobs import enqueue, pause_queue
from django_jobs.limits import RateLimit
from django_jobs.transitions import ClaimStatement, outlook
from tests.db.test_indexes import job_table_scans

pytestmark = pytest.mark.django_db

EVERY_QUEUE = ClaimStatement("w", None, {"test.noop": 1, "test.record": 1})


def test_nothing_pending_means_no_due_time_and_no_pause() -> None:
    seen = outlook(EVERY_QUEUE)
    assert (seen.due_in, seen.paused) == (None, frozenset())


def test_the_next_due_job_is_found_whatever_its_priority() -> None:
    enqueue("test.noop", {}, delay=40, priority=10)
    enqueue("test.noop", {}, delay=20, priority=0)
    enqueue("test.record", {}, delay=7, priority=-50)  # the lowest level holds the earliest
    enqueue("test.noop", {}, delay=60, priority=-50)
    due_in = outlook(EVERY_QUEUE).due_in
    assert due_in is not None and 6 < due_in <= 7


def test_a_job_due_now_reads_as_due() -> None:
    enqueue("test.noop", {}, delay=30)
    enqueue("test.noop", {})
    due_in = outlook(EVERY_QUEUE).due_in
    assert due_in is not None and due_in <= 0


def test_jobs_the_worker_could_not_claim_are_not_waited_for() -> None:
    enqueue("test.permanent", {}, delay=1)  # a type it does not run
    enqueue("test.noop", {}, delay=2, queue="emails")  # a queue it does not serve
    enqueue("test.noop", {}, delay=3, queue="reports")  # a paused queue
    pause_queue("reports", actor="ops", reason="migration")
    with connection.cursor() as cursor:  # a payload version newer than it reads
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, available_at, on_lost) VALUES ('default', 'test.noop', 2, '{}', 'pending',"
            " 0, 0, 5, now() + interval '4 seconds', 'retry')"
        )
    # A key at its limit: its next job waits for the running one (which notifies when it ends).
    running = enqueue("test.noop", {}, concurrency_key="k")
    waiting = enqueue("test.noop", {}, concurrency_key="k")
    with connection.cursor() as cursor:
        keyed = [running.id, waiting.id]
        cursor.execute("UPDATE django_jobs_job SET concurrency_limit = 1 WHERE id = ANY(%s)", [keyed])
        cursor.execute(
            "UPDATE django_jobs_job SET status = 'running', execution_id = gen_random_uuid(),"
            " worker_id = 'w', started_at = now(), heartbeat_at = now(),"
            " lease_expires_at = now() + interval '1 minute'"
            " WHERE id = %s",
            [running.id],
        )
    enqueue("test.noop", {}, delay=9)  # the one it waits for

    named = ClaimStatement("w", ["default", "reports"], {"test.noop": 1})
    seen = outlook(named)
    assert seen.due_in is not None and 8 < seen.due_in <= 9
    assert seen.paused == frozenset({"reports"})


def test_the_outlook_reads_a_few_index_entries_however_many_jobs_are_scheduled() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
            " max_attempts, available_at, on_lost)"
            " SELECT (ARRAY['default', 'emails'])[1 + i % 2], (ARRAY['test.noop', 'test.skip'])[1 + i % 2],"
            " 1, '{}', 'pending', (i % 3) - 1, 0, 5, now() + make_interval(secs => 60 + i % 5000), 'retry'"
            " FROM generate_series(1, 50000) AS i"
        )
        cursor.execute("ANALYZE django_jobs_job")
    for statement in (
        EVERY_QUEUE,
        ClaimStatement("w", ["default"], {"test.noop": 1}),
        ClaimStatement("w", None, {"test.noop": 1}, rate_limits={"test.noop": RateLimit(5, 1.0)}),
    ):
        assert job_table_scans(statement.outlook_sql, statement.outlook_params()) == []
        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement.outlook_sql, statement.outlook_params()
            )
            root = cursor.fetchone()[0][0]["Plan"]
        # Three priority levels: a few dozen pages, where an empty claim or min(available_at)
        # reads every one of the 50,000 scheduled entries (hundreds of pages).
        pages = root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0)
        assert pages < 100, json.dumps(root)[:2000]
        due_in = outlook(statement).due_in
        assert due_in is not None and 59 < due_in <= 61
