"""What holds the vacuum horizon back, named by ``checkjobs``, the health check and the dashboard:
a real second connection holds a snapshot open while the product reads."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from io import StringIO

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from health_check.exceptions import ServiceWarning
from psycopg import IsolationLevel, sql

from django_jobs.health import JobsHealthCheck
from django_jobs.observe.findings import Finding, find
from django_jobs.observe.horizon import held_horizon, sentence
from django_jobs.reads.horizon import Holder, read_holders
from tests.process.throwaway_pg import ThrowawayCluster

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "/admin/django_jobs/job/dashboard/"
#: Short enough for a test to pass it, long enough that a test's own statements never do.
FAST = {"CHECK_HORIZON_WARNING": 0.2}
#: A non-job table: the snapshot must hold the horizon, not lock what the product reads.
READ_ELSEWHERE = "SELECT count(*) FROM django_content_type"


def dsn(**options: object) -> str:
    db = connection.settings_dict
    parts = {
        "host": db["HOST"],
        "port": db["PORT"] or 5432,
        "user": db["USER"],
        "dbname": db["NAME"],
        **options,
    }
    return " ".join(f"{key}={value}" for key, value in parts.items())


@pytest.fixture
def open_connection() -> Iterator[Callable[..., psycopg.Connection[tuple[object, ...]]]]:
    """Connections of another client (a report, an analyst's psql), closed after the test."""
    opened: list[psycopg.Connection[tuple[object, ...]]] = []

    def connect(application: str, isolation: IsolationLevel) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(dsn(), application_name=application)
        conn.isolation_level = isolation
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


def holding(
    connect: Callable[..., psycopg.Connection[tuple[object, ...]]],
    application: str,
    statement: str = READ_ELSEWHERE,
) -> psycopg.Connection[tuple[object, ...]]:
    """A connection left idle in a REPEATABLE READ transaction that has read another table."""
    holder = connect(application, IsolationLevel.REPEATABLE_READ)
    holder.execute(statement)  # psycopg opened the transaction; it stays open
    return holder


def checkjobs(*args: str, **thresholds: object) -> tuple[int, str]:
    out = StringIO()
    try:
        with override_settings(DJANGO_JOBS={**FAST, **thresholds}):
            call_command("checkjobs", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def until_held(pid: int, deadline: float = 10.0, **thresholds: object) -> list[Finding]:
    """The horizon findings once the holder ``pid`` has passed the threshold (polled: its age
    is the database's clock, not ours)."""
    end = time.monotonic() + deadline
    while True:
        with override_settings(DJANGO_JOBS={**FAST, **thresholds}):
            found = [f for f in find() if f.code == "horizon_held"]
        if any(f.subject and f.subject["name"] == str(pid) for f in found):
            return found
        assert time.monotonic() < end, f"no finding named pid {pid}: {found}"
        time.sleep(0.05)


def test_a_held_snapshot_is_named_by_checkjobs_and_gone_once_it_commits(
    open_connection: Callable[..., psycopg.Connection[tuple[object, ...]]],
) -> None:
    app = f"nightly-report-{uuid.uuid4().hex[:8]}"
    holder = holding(open_connection, app)
    pid = holder.info.backend_pid
    assert checkjobs(CHECK_HORIZON_WARNING=3600)[1].startswith("OK:")  # a young transaction is not one
    until_held(pid)

    code, out = checkjobs()
    assert code == 0  # a warning: the queue still runs
    assert out.startswith(
        f"WARNING: session pid {pid} (user {connection.settings_dict['USER']}, application {app}"
    )
    assert "idle in transaction" in out and "has held the vacuum horizon back for " in out
    assert f"SELECT pg_terminate_backend({pid})" in out and "idle_in_transaction_session_timeout" in out
    assert f"its statement: {READ_ELSEWHERE}" in out
    [found] = json.loads(checkjobs("--json")[1])
    assert found["code"] == "horizon_held" and found["level"] == "warning"
    assert found["subject"]["name"] == str(pid) and found["subject"]["application"] == app
    assert found["subject"]["held_seconds"] > 0.2 and found["subject"]["xid_age"] >= 0

    holder.commit()
    assert checkjobs()[1].startswith("OK:")  # gone at once


def test_an_idle_read_committed_transaction_holds_nothing_and_is_not_reported(
    open_connection: Callable[..., psycopg.Connection[tuple[object, ...]]],
) -> None:
    """Between two statements a READ COMMITTED transaction that wrote nothing keeps no snapshot:
    vacuum is not held back, whatever its age. One that wrote holds the horizon with its xid."""
    reader = open_connection("idle-reader", IsolationLevel.READ_COMMITTED)
    reader.execute(READ_ELSEWHERE)
    writer = open_connection("idle-writer", IsolationLevel.READ_COMMITTED)
    writer.execute("CREATE TEMPORARY TABLE scratch (n int)")  # a write: it takes an xid
    named = {f.subject["application"] for f in until_held(writer.info.backend_pid) if f.subject}
    assert named == {"idle-writer"}


def test_the_holders_statement_is_redacted_in_checkjobs_and_escaped_on_the_dashboard(
    open_connection: Callable[..., psycopg.Connection[tuple[object, ...]]],
) -> None:
    hostile = (
        "SELECT count(*) FROM django_content_type WHERE 'password=hunter2' <> '<script>alert(1)</script>'"
    )
    holder = holding(open_connection, "<b>bold</b>", hostile)
    until_held(holder.info.backend_pid)

    out = checkjobs()[1]
    assert "hunter2" not in out and "password=[REDACTED]" in out

    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    with override_settings(DJANGO_JOBS=FAST):
        page = client.get(DASHBOARD).content.decode()
    assert 'id="horizon"' in page and f"session {holder.info.backend_pid}" in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "hunter2" not in page

    holder.commit()
    with override_settings(DJANGO_JOBS=FAST):
        assert 'id="horizon"' not in client.get(DASHBOARD).content.decode()


def test_the_health_check_passes_a_held_horizon_unless_told_to_fail_on_warnings(
    open_connection: Callable[..., psycopg.Connection[tuple[object, ...]]],
) -> None:
    holder = holding(open_connection, "health-holder")
    until_held(holder.info.backend_pid)
    with override_settings(DJANGO_JOBS=FAST):
        JobsHealthCheck().run()  # warnings pass by default, as for the other findings
        with pytest.raises(ServiceWarning, match="health-holder"):
            JobsHealthCheck(warnings_fail=True).run()


@pytest.fixture
def plain_role() -> Iterator[str]:
    """A role without superuser or pg_read_all_stats, dropped after the test (roles are the
    server's, not the test database's)."""
    name = f"dj_horizon_plain_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{name}" NOLOGIN')
    try:
        yield name
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute(f'DROP ROLE "{name}"')


def test_a_role_without_pg_read_all_stats_is_told_what_it_cannot_see(
    open_connection: Callable[..., psycopg.Connection[tuple[object, ...]]], plain_role: str
) -> None:
    holder = holding(
        open_connection, "someone-elses-report", "SELECT 'password=hunter2' FROM django_content_type"
    )
    pid = holder.info.backend_pid
    with psycopg.connect(dsn(), autocommit=True) as busy:
        for _ in range(5):  # other transactions commit: the held snapshot grows older in xids
            busy.execute("SELECT txid_current()")
    with connection.cursor() as cursor:
        cursor.execute(f'SET ROLE "{plain_role}"')
    try:
        with override_settings(DJANGO_JOBS={**FAST, "CHECK_HORIZON_XIDS": 10**9}):
            assert held_horizon() == []  # its start is hidden: the time threshold cannot apply
        with override_settings(DJANGO_JOBS={**FAST, "CHECK_HORIZON_XIDS": 3}):
            [seen] = held_horizon()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
    assert (seen.kind, seen.name, seen.application) == ("session", str(pid), "someone-elses-report")
    assert seen.hidden and seen.query is None and seen.held_seconds is None and seen.state is None
    assert seen.xid_age >= 5
    said = sentence(seen)
    assert "pg_read_all_stats" in said and f"pg_terminate_backend({pid})" in said
    assert "hunter2" not in said and "insufficient privilege" not in said


def test_a_prepared_transaction_is_named_by_its_gid() -> None:
    # The shared server allows no prepared transaction (max_prepared_transactions = 0, its
    # default): a cluster of the test's own does.
    cluster = ThrowawayCluster(max_prepared_transactions="5")
    try:
        cluster.create()
        gid = f"it's-{uuid.uuid4().hex[:8]}"
        with cluster.connect() as preparing:
            preparing.execute("BEGIN")
            preparing.execute("SELECT pg_current_xact_id()")  # an xid to hold the horizon with
            preparing.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        with cluster.connect() as reader:
            found = [h for h in read_holders(reader.cursor()) if h.kind == "prepared"]
            assert len(found) == 1, found
            [prepared] = found
            assert prepared.name == gid and prepared.user == "postgres" and prepared.xid_age >= 1
            assert prepared.held_seconds is not None and prepared.held_seconds >= 0
            assert "ROLLBACK PREPARED 'it''s-" in sentence(prepared)
            # From outside any transaction block: the session that prepared it is gone.
            reader.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            assert [h for h in read_holders(reader.cursor()) if h.kind == "prepared"] == []
    finally:
        cluster.destroy()


def held_horizon_fast() -> list[Holder]:
    with override_settings(DJANGO_JOBS=FAST):
        return held_horizon()
