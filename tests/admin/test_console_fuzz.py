"""Over 300 lines: the pages share one table of 100,000 rows, made once per test, and each of the
two checks of their reads has a test of its own that it can fail.

Whatever a person (or a scanner) types into the console: always a page or a 400, never a 500,
and never a query that reads the whole job table.

Hypothesis drives the test client over the search box, every filter, the pagination and sorting
parameters, unknown parameters, the job page and the action view, with arbitrary Unicode, NUL
bytes, huge and negative numbers and very long strings. Every query a request makes on the job
table is then EXPLAINed on a table of 100,000 rows: a query no index serves, or one that reads
a whole index of it, fails the test.

The dashboard and the metrics view take no parameters, but count: an index that serves a count
of every pending job still reads every one of them. Their statements are run with EXPLAIN
ANALYZE, their caps lowered below what the table holds, and one that reads more rows than the
caps allow fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.console import dashboard
from django_jobs.console.job_actions import ACTIONS
from django_jobs.reads import activity, queues
from django_jobs.states import JobStatus
from tests.admin.console import DASHBOARD, LIST

# Committed rows, so that the fixture can VACUUM them: a fresh table has no visibility map, and
# the planner then counts a filter as common as status=pending (10 %) faster by a sequential scan
# than by an index, where a vacuumed table of production (autovacuum) answers from the index.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROWS = 100_000
QUEUES = ["default", "emails", "reports", "integrations", "billing"]
TYPES = [f"test.kind{n}" for n in range(20)]
CODES = ["UNKNOWN", "PROVIDER_5XX", "RATE_LIMITED", "AUTH_FAILED", "PAYLOAD_INVALID", "LEASE_LOST"]
ANSWERS = {200, 302, 400, 404}  # a page, the admin's "?e=1" redirect, a clear refusal, not found

FUZZ = settings(
    max_examples=120,
    deadline=None,
    # The 100,000 rows are made once per test; each example only reads them (or retries a job).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

odd_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["²", "٣", "#²", "\x00", "a\x00b", "9" * 40, "-1", "#-1", "0", "#0", "1e9", " 42 ", "x" * 5000,
         "' OR 1=1 --", "%", "_", "\\", "𝟘", "\u202e", "NaN", "-0", "00000000000000000001"]
    ),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)  # fmt: skip


def value_of(*real: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(real), odd_text) if real else odd_text


list_parameters = st.fixed_dictionaries(
    {},
    optional={
        "q": value_of("42", "#42", "test.kind3", "AUTH_FAILED", "order:17"),
        "status": value_of(*JobStatus.values),
        "attention": value_of("stale", "review"),
        "queue": value_of(*QUEUES),
        "type": value_of(*TYPES),
        "error_code": value_of(*CODES),
        "failed_code": value_of(*CODES),
        "p": value_of("1", "2", "199", "200", "201"),
        "o": value_of("1", "-1", "2", "-2.1", "3.4.5"),
        "all": st.just(""),
        "e": st.just("1"),
    },
)
unknown_parameters = st.dictionaries(
    st.one_of(st.sampled_from(["id__gt", "payload__contains", "status__in", "pk", "_changelist_filters"]),
              odd_text),
    odd_text,
    max_size=2,
)  # fmt: skip


@pytest.fixture
def crowded(superuser: User, client: Client) -> Client:
    """100,000 jobs of every status, queue, type and error code, vacuumed and analysed; a
    superuser's client."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,
                max_attempts, last_error_code, unique_key, available_at, finished_at, started_at,
                worker_id, execution_id, heartbeat_at, lease_expires_at)
            SELECT (%(queues)s::text[])[n %% 5 + 1],
                   (%(types)s::text[])[n %% 20 + 1],
                   1, jsonb_build_object('n', n, 'token', md5(n::text)), s.status, n %% 7 - 3,
                   n %% 4, 5,
                   CASE WHEN s.status IN ('failed', 'needs_review') OR n %% 9 = 0
                        THEN (%(codes)s::text[])[n %% 6 + 1] END,
                   CASE WHEN n %% 10 = 0 THEN 'order:' || n END,
                   now() - make_interval(secs => n %% 3600),
                   CASE WHEN s.status IN ('completed', 'failed', 'cancelled')
                        THEN now() - make_interval(secs => n) END,
                   CASE WHEN s.status <> 'pending' THEN now() - make_interval(secs => n + 5) END,
                   CASE WHEN s.status = 'running' THEN 'web-1:1:abc' END,
                   CASE WHEN s.status = 'running' THEN gen_random_uuid() END,
                   CASE WHEN s.status = 'running' THEN now() END,
                   CASE WHEN s.status = 'running' THEN now() + make_interval(secs => 60 - n %% 120) END
            FROM generate_series(1, %(rows)s) AS n,
                 LATERAL (SELECT CASE WHEN n %% 100 < 80 THEN 'completed' WHEN n %% 100 < 90 THEN 'pending'
                                      WHEN n %% 100 < 95 THEN 'failed' WHEN n %% 100 < 97 THEN 'running'
                                      WHEN n %% 100 < 98 THEN 'needs_review' ELSE 'cancelled' END
                         AS status) AS s
            """,
            {"queues": QUEUES, "types": TYPES, "codes": CODES, "rows": ROWS},
        )
        cursor.execute(
            "INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt)"
            " SELECT id, 'retry_scheduled', 'running', 'pending', 1 FROM django_jobs_job WHERE id % 3 = 0"
        )
        cursor.execute("VACUUM ANALYZE django_jobs_job")
        cursor.execute("VACUUM ANALYZE django_jobs_jobevent")
    client.force_login(superuser)
    return client


def job_table_scans(queries: list[dict[str, Any]]) -> Iterator[str]:
    """The queries among these that read the whole job table. Those are the queries PostgreSQL
    can plan only with a sequential scan of it. They are also the ones it plans with a scan of a
    whole (not partial) index of it, where every row is read: sorted, aggregated or returned,
    not stopped early by a LIMIT.

    Asked with sequential scans disabled, so that the answer is whether an index serves the
    query, not which plan costs less on this table of 100,000 rows: with 10 % of them pending,
    and pending jobs on every page, counting them by a sequential scan costs nearly what the
    claim index costs, and the planner's choice flips with its statistics.
    """
    with connection.cursor() as cursor:
        partial = _partial_indexes(cursor)
        for query in queries:
            sql = query["sql"]
            statement = sql.lstrip().upper()
            if "django_jobs_job" not in sql or statement.startswith(("EXPLAIN", "SAVEPOINT", "RELEASE")):
                continue
            with transaction.atomic():
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
                plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            if _reads_whole_table(plan[0]["Plan"], None, partial):
                yield sql


def _partial_indexes(cursor: Any) -> set[str]:
    """The job table's partial indexes: read whole, they hold only their predicate's rows."""
    cursor.execute(
        "SELECT indexrelid::regclass::text FROM pg_index"
        " WHERE indrelid = 'django_jobs_job'::regclass AND indpred IS NOT NULL"
    )
    return {row[0] for row in cursor.fetchall()}


#: Plan nodes that read all of their input before they return a row.
_READ_OUT = {"Sort", "Aggregate", "Hash", "Materialize", "Unique", "WindowAgg"}


def _reads_whole_table(node: dict[str, Any], limit: float | None, partial: set[str]) -> bool:
    """Whether a scan of the job table under ``node`` reads it whole, or most of it. ``limit``:
    the rows a LIMIT above ``node`` stops after; None when all of its rows are read."""
    if node.get("Relation Name") == "django_jobs_job":
        if node["Node Type"] == "Seq Scan":
            return True
        if (
            node["Node Type"] in ("Index Scan", "Index Only Scan")
            and "Index Cond" not in node
            and node.get("Index Name") not in partial
            # All of a whole index; or, stopped by a LIMIT, walking it for rows so rare that
            # it reads half of it or more before it has enough.
            and (limit is None or ("Filter" in node and node["Plan Rows"] <= 2 * limit))
        ):
            return True
    if node["Node Type"] == "Limit":
        limit = node["Plan Rows"]
    elif node["Node Type"] in _READ_OUT:
        limit = None
    return any(_reads_whole_table(child, limit, partial) for child in node.get("Plans", []))


def answer(client: Client, path: str, data: dict[str, str], method: str = "get") -> int:
    """Make the request; fail on a 500 or on a query that scans the job table."""
    with CaptureQueriesContext(connection) as queries:
        response = getattr(client, method)(path, data)
    assert response.status_code in ANSWERS, response.status_code
    scans = list(job_table_scans(queries.captured_queries))
    assert not scans, scans
    return int(response.status_code)


def test_the_list_answers_any_parameters(crowded: Client) -> None:
    @FUZZ
    @given(params=list_parameters, unknown=unknown_parameters)
    def fuzz(params: dict[str, str], unknown: dict[str, str]) -> None:
        answer(crowded, LIST, {**unknown, **params})

    fuzz()
    # The realistic combinations, each at least once, whatever Hypothesis chose.
    for status in JobStatus.values:
        for queue in QUEUES[:2]:
            assert answer(crowded, LIST, {"status": status, "queue": queue}) == 200
    for code in CODES:
        assert answer(crowded, LIST, {"failed_code": code, "type": TYPES[0]}) == 200
    assert answer(crowded, LIST, {"attention": "stale", "p": "2"}) in (200, 302)
    # Two filters that contradict each other (found by Hypothesis): an empty answer, no walk.
    assert answer(crowded, LIST, {"status": "completed", "attention": "review"}) == 200
    assert answer(crowded, LIST, {"status": "failed", "attention": "stale"}) == 200
    assert answer(crowded, LIST, {"p": "200"}) == 200  # the deepest page


def test_the_job_page_answers_any_parameters(crowded: Client) -> None:
    some_id = _an_id(JobStatus.FAILED)

    @FUZZ
    @given(object_id=st.one_of(st.just(str(some_id)), odd_text), before=st.one_of(st.none(), odd_text))
    def fuzz(object_id: str, before: str | None) -> None:
        params = {} if before is None else {"events_before": before}
        answer(crowded, f"{LIST}{quote(object_id, safe='')}/change/", params)

    fuzz()


def test_actions_answer_any_parameters(crowded: Client) -> None:
    real = [_an_id(status) for status in (JobStatus.FAILED, JobStatus.PENDING, JobStatus.NEEDS_REVIEW)]
    ids = st.one_of(
        odd_text,
        st.lists(st.one_of(st.sampled_from(real), st.integers(-(10**20), 10**20)), max_size=5).map(
            lambda values: ",".join(map(str, values))
        ),
    )
    names = st.one_of(st.sampled_from(list(ACTIONS)), odd_text.filter(lambda t: t and "/" not in t))

    @FUZZ
    @given(action=names, ids=ids, post=st.booleans(), reason=odd_text)
    def fuzz(action: str, ids: str, post: bool, reason: str) -> None:
        url = f"{LIST}act/{quote(action, safe='')}/"
        if post:
            answer(crowded, url, {"ids": ids, "reason": reason}, method="post")
        else:
            answer(crowded, url, {"ids": ids})

    fuzz()


def _an_id(status: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM django_jobs_job WHERE status = %s ORDER BY id DESC LIMIT 1", [status])
        return int(cursor.fetchone()[0])


def test_the_scan_detector_sees_a_scan(crowded: Client) -> None:
    """The guard above is only worth something if it can fail."""

    def sql(where: str, tail: str = "") -> dict[str, Any]:
        return {"sql": f"SELECT id FROM django_jobs_job {where} {tail}"}

    whole = [
        {"sql": "SELECT count(*) FROM django_jobs_job WHERE payload @> '{\"n\": 7}'"},  # no index
        sql("", "ORDER BY payload LIMIT 100"),  # every row read to sort them
        sql("WHERE priority > 0", "ORDER BY id DESC"),  # the whole primary key, no LIMIT
        sql("WHERE payload @> '{\"n\": 1}'", "ORDER BY id DESC LIMIT 100"),  # rare rows: most of it
    ]
    served = [
        sql("WHERE id = 7"),
        sql("", "ORDER BY id DESC LIMIT 100"),  # the newest rows, stopped by the LIMIT
        sql("WHERE status = 'failed'", "ORDER BY id DESC LIMIT 100"),
        sql("WHERE type = 'test.kind3'", "ORDER BY id DESC LIMIT 100"),
        {"sql": "SELECT count(*) FROM django_jobs_job WHERE status = 'pending'"},  # a partial index
    ]
    assert list(job_table_scans(whole)) == [query["sql"] for query in whole]
    assert list(job_table_scans(served)) == []


def test_jobs_list_reads_through_an_index_whatever_the_filters(crowded: Client) -> None:
    # `manage.py jobs list` pages the same table as the console's list: on 100,000 vacuumed and
    # analysed jobs (a tiny table's plans say nothing of a real one's), every filter is served
    # by an index and stops after the rows it prints.
    for filters in (
        [],
        ["--status", "failed"],
        ["--code", "AUTH_FAILED"],
        ["--type", TYPES[3]],
        ["--queue", "emails"],
        ["--status", "failed", "--code", "AUTH_FAILED", "--type", TYPES[3], "--queue", "emails"],
    ):
        with CaptureQueriesContext(connection) as queries:
            call_command("jobs", "list", *filters, stdout=StringIO(), stderr=StringIO())
        reads = [q for q in queries.captured_queries if "django_jobs_job" in q["sql"]]
        assert len(reads) == 1 and "LIMIT 50" in reads[0]["sql"], filters
        assert not list(job_table_scans(reads)), (filters, reads)


# ---- the dashboard and the metrics view: bounded reads --------------------------------------------

METRICS = "/jobs/metrics"
#: The tables whose rows are counted as read.
READ_TABLES = ("django_jobs_job", "django_jobs_jobevent")
#: The running jobs' partial indexes, and a scan's condition on them. Running jobs are as many as
#: the workers' slots (and the stale ones until the reaper takes them back), not a share of the
#: table: they are counted whole, through whichever index.
LIVE_INDEXES = {"django_jobs_running", "django_jobs_key_running", "django_jobs_key_running_once"}
RUNNING_ONLY = "((status)::text = 'running'::text)"
#: The most rows of the job and event tables one statement of the dashboard or the metrics view
#: may read with ``lowered_caps``: above what those allow (5 queues × 5 counts × 20 rows; 3 × 100
#: executions and 100 retries), below any set of the 100,000 rows that a count over a whole set
#: reads (10,000 pending jobs, 5,000 failed, some 2,900 completed in the last hour, 33,000
#: retries).
READ_BOUND = 1_000


@pytest.fixture
def lowered_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caps of the dashboard's and the metrics view's counts, below what the table holds in
    every set they count: what a statement reads shows whether its cap stops it."""
    monkeypatch.setattr(queues, "COUNT_CAP", 20)
    monkeypatch.setattr(dashboard, "COUNT_CAP", 20)
    monkeypatch.setattr(activity, "MINUTE_CAP", 5)
    monkeypatch.setattr(activity, "SAMPLE", 100)


def rows_read(queries: list[dict[str, Any]]) -> Iterator[tuple[int, str]]:
    """How many rows of the job and event tables each of these reads reads, kept or filtered
    out, in all loops (as bench/admin_pages.py counts them), the running jobs' indexes aside:
    each one run with EXPLAIN ANALYZE."""
    with connection.cursor() as cursor:
        for query in queries:
            sql = query["sql"]
            reads = sql.lstrip().upper().startswith(("SELECT", "WITH"))
            if not reads or not any(table in sql for table in READ_TABLES):
                continue
            cursor.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            yield _read(plan[0]["Plan"]), sql


def _read(node: dict[str, Any]) -> int:
    read = 0
    running = node.get("Index Name") in LIVE_INDEXES or RUNNING_ONLY in (
        node.get("Index Cond", ""),
        node.get("Recheck Cond", ""),
    )
    if node.get("Relation Name") in READ_TABLES and "Scan" in node["Node Type"] and not running:
        per_loop = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        read += int(per_loop * node.get("Actual Loops", 0))
    return read + sum(_read(child) for child in node.get("Plans", []))


@pytest.mark.usefixtures("lowered_caps")
def test_the_dashboard_and_the_metrics_read_what_their_caps_allow(crowded: Client) -> None:
    for url in (DASHBOARD, METRICS):
        with CaptureQueriesContext(connection) as queries:
            response = crowded.get(url)
        assert response.status_code == 200, url
        assert not list(job_table_scans(queries.captured_queries)), url
        over = [(read, sql) for read, sql in rows_read(queries.captured_queries) if read > READ_BOUND]
        assert not over, (url, over)
    # The page says where it stopped counting.
    page = crowded.get(DASHBOARD).content.decode()
    assert ">20+</td>" in page  # each queue's 2,000 pending jobs, counted up to the cap
    assert "5+ completed" in page  # 48 completions a minute, counted up to 5
    assert "(the newest 100)" in page  # failures by code, of the newest failures only


def test_the_read_counter_sees_a_whole_set(crowded: Client) -> None:
    """The plan check lets a count of every pending job pass (a partial index serves it); what
    it reads does not."""
    whole = {"sql": "SELECT count(*) FROM django_jobs_job WHERE status = 'pending'"}
    capped = {
        "sql": "SELECT count(*) FROM (SELECT FROM django_jobs_job WHERE status = 'pending' LIMIT 20) AS c"
    }
    assert list(job_table_scans([whole, capped])) == []
    assert [read for read, _ in rows_read([whole, capped])] == [ROWS // 10, 20]
