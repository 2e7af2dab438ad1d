"""The claim and the reaper's search stay index scans on a table of 1,000,000 rows."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection

from django_jobs.limits import RateLimit
from django_jobs.transitions import ClaimStatement, recovery

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.usefixtures("vacuum_afterwards")]

FILL = """
INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at, attempts,
                             max_attempts, execution_id, heartbeat_at, lease_expires_at, finished_at)
SELECT (ARRAY['default', 'mail', 'reports'])[1 + i % 3], 'test.noop', 1, '{}',
       CASE WHEN i %% %(pending_every)s = 0 THEN 'pending'
            WHEN i %% 1000 = 1 THEN 'running'
            ELSE 'completed' END,
       (i %% 3) - 1, now() - make_interval(secs => i %% 5000), 1, 5,
       gen_random_uuid(), now(), now() + make_interval(secs => i %% 600), NULL
FROM generate_series(1, 1000000) AS i
"""


def plan(sql: str, params: object) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return json.dumps(cursor.fetchone()[0])


def job_table_scans(sql: str, params: object) -> list[str]:
    """The plan's seq scans of the job table and its sorts over job rows read from the table.

    The claim's bookkeeping of concurrency keys sorts and scans its own small CTEs and tables:
    those are not the job table's backlog. Nor is the claim's merge: the sort of the first rows
    of each kind (a nested loop over the kinds' function scan, alone or joined with the queues'
    kinds the claim listed beside a paused queue, each kind's scan under its LIMIT).
    """
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        root = cursor.fetchone()[0][0]["Plan"]

    def reads_job_table(node: dict[str, Any]) -> bool:
        return node.get("Relation Name") == "django_jobs_job" or any(
            reads_job_table(child) for child in node.get("Plans", [])
        )

    def merges_kinds(sort: dict[str, Any]) -> bool:
        (loop,) = sort["Plans"]
        if loop["Node Type"] == "Result" and "One-Time Filter" in loop:
            (loop,) = loop["Plans"]  # the claim's count of dead entries is read before the scans
        sides = loop.get("Plans", [])
        return (
            loop["Node Type"] == "Nested Loop"
            and len(sides) == 2
            and not reads_job_table(sides[0])
            and re.search(r'"Node Type": "Function Scan".*?"Alias": "k(_\d+)?"', json.dumps(sides[0]))
            and "Limit" in json.dumps(sides[1])
        )

    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "django_jobs_job":
            found.append("Seq Scan on django_jobs_job")
        if node["Node Type"] == "Sort" and reads_job_table(node) and not merges_kinds(node):
            found.append(f"Sort by {node.get('Sort Key')}")
        for child in node.get("Plans", []):
            walk(child)

    walk(root)
    return found


@pytest.fixture(params=[100, 1], ids=["1M rows, 1% pending", "1M rows, all pending"])
def million_rows(request: pytest.FixtureRequest) -> None:
    # Inside the test's transaction: rolled back afterwards, never committed.
    with connection.cursor() as cursor:
        cursor.execute(FILL.replace("%(pending_every)s", str(request.param)).replace("%%", "%"))
        cursor.execute("ANALYZE django_jobs_job")


def test_the_claim_the_reaper_and_checkjobs_read_through_indexes(million_rows: None) -> None:
    """One test per fill: a million rows take tens of seconds to write."""
    claim_and_reaper_searches_are_index_scans()
    checkjobs_reads_are_index_probes()


def claim_and_reaper_searches_are_index_scans() -> None:
    every_queue = ClaimStatement("w", None, {"test.noop": 1})
    text = plan(every_queue.sql, every_queue.params(100))
    assert '"django_jobs_ready"' in text
    assert job_table_scans(every_queue.sql, every_queue.params(100)) == []
    # Paused queues: the tiny queue table is read once, into a hash, whatever the backlog.
    assert "hashed SubPlan" in text

    # A worker that knows a rate-limited type: its filter of full windows keeps the index scan.
    rated = ClaimStatement("w", None, {"test.noop": 1}, rate_limits={"test.noop": RateLimit(20, 1.0)})
    assert '"django_jobs_ready"' in plan(rated.sql, rated.params(100))
    assert job_table_scans(rated.sql, rated.params(100)) == []

    # Every queue while a queue is paused: the (queue, type, version) of ready jobs by a loose
    # scan of the queue index, then one ordered scan of it for each, merged by a tiny sort.
    every_queue.queues_paused = True
    text = plan(every_queue.sql, every_queue.params(100))
    assert '"django_jobs_ready_queue"' in text and '"django_jobs_ready"' not in text
    assert job_table_scans(every_queue.sql, every_queue.params(100)) == []

    # Named queues: one ordered scan of the queue index per queue, merged by a tiny sort.
    named = ClaimStatement("w", ["mail", "reports"], {"test.noop": 1})
    text = plan(named.sql, named.params(100))
    assert '"django_jobs_ready_queue"' in text
    assert "Seq Scan on django_jobs_job" not in text and "hashed SubPlan" in text

    # The reaper's search for expired leases.
    text = plan(recovery._SELECT_EXPIRED, [100])
    # With running jobs the partial index on leases serves it; with none, any index will do.
    assert "django_jobs_running" in text or "django_jobs_status" in text
    assert "Seq Scan" not in text


def checkjobs_reads_are_index_probes() -> None:
    from django_jobs.observe import findings
    from django_jobs.reads import findings as reads

    # The oldest due job of a queue: a probe per distinct (type, version, priority) of its ready
    # jobs, one per kind of the jobs not promoted yet, never a scan of the queue's backlog.
    with connection.cursor() as cursor:  # a kind scheduled for later in another queue
        cursor.execute(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, available_at,"
            " attempts, max_attempts) SELECT 'reports', 'test.later', 1, '{}', 'pending', 0,"
            " now() + make_interval(secs => i), 0, 5 FROM generate_series(1, 1000) AS i"
        )
    text = plan(reads.OLDEST_PENDING, {"queue": "mail"})
    assert '"django_jobs_ready_queue"' in text and '"django_jobs_later"' in text
    assert job_table_scans(reads.OLDEST_PENDING, {"queue": "mail"}) == []
    with connection.cursor() as cursor:
        # The rows of an earlier test, rolled back, leave index entries until the vacuum: the
        # first scan passing them marks them dead, and is not what is measured.
        cursor.execute(reads.OLDEST_PENDING, {"queue": "mail"})
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + reads.OLDEST_PENDING, {"queue": "mail"})
        executed = cursor.fetchone()[0][0]
    # Three priorities of one kind, one kind for later: a handful of index probes, not a third
    # of a million rows.
    buffers = executed["Plan"]["Shared Hit Blocks"] + executed["Plan"]["Shared Read Blocks"]
    assert buffers < 1000, buffers  # the bad plan of a third of a million rows reads 300,000
    assert executed["Execution Time"] < 50, executed["Execution Time"]

    # As the reaper's search: with running jobs their partial index; with none, any index will do.
    text = plan(reads.STALE, [findings.COUNT_CAP])
    assert ("django_jobs_running" in text or "django_jobs_status" in text) and "Seq Scan" not in text
    assert {f.code for f in findings.find()} <= {"oldest_due", "no_worker", "stale_running"}
