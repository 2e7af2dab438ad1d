"""The console under weight and under failure: huge payloads, long histories, big selections,
a connection lost in the middle of an action."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.contrib.admin.models import LogEntry, LogEntryManager
from django.contrib.auth.models import User
from django.core.paginator import InvalidPage
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.html import strip_tags

from django_jobs.console.job_actions import CONFIRM_ROWS_SHOWN
from django_jobs.console.job_page import EVENTS_PER_PAGE
from django_jobs.console.listing import MAX_PAGES, EstimatedCountPaginator
from django_jobs.models import Job, JobEvent
from django_jobs.states import JobStatus
from tests.admin.console import DASHBOARD, LIST, act_url, detail_url, staff
from tests.factories import JobFactory

BIG = 256 * 1024


def bytes_read(queries: list[dict[str, Any]]) -> int:
    """What the captured SELECTs on the job table read, as the text PostgreSQL sends back."""
    total = 0
    with connection.cursor() as cursor:
        for query in queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith("SELECT") or "django_jobs_job" not in sql:
                continue
            cursor.execute(f"SELECT coalesce(sum(octet_length(t::text)), 0) FROM ({sql}) AS t")
            total += cursor.fetchone()[0]
    return total


def insert_events(job_id: int, count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason,"
            " created_at) SELECT %s, 'manual_retry', 'failed', 'pending', 0, 'ops', 'retry ' || n,"
            " now() - make_interval(secs => %s - n) FROM generate_series(1, %s) AS n",
            [job_id, count, count],
        )


@pytest.mark.django_db
def test_the_list_of_huge_payloads_reads_only_what_it_shows(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory.create_batch(
        50, failed=True, payload={"blob": "p" * BIG}, checkpoint={"blob": "c" * BIG},
        last_error="E" * 8000, progress={"note": "n" * 1000},
    )  # fmt: skip
    client = login(superuser)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(LIST).status_code == 200
    listed = bytes_read(queries.captured_queries)
    ids = list(Job.objects.values_list("id", flat=True))
    with CaptureQueriesContext(connection) as queries:
        assert client.get(act_url("retry", *ids)).status_code == 200
    confirmed = bytes_read(queries.captured_queries)
    # 50 rows × (256 KiB payload + 256 KiB checkpoint + 8 KB error) would be 26 MB.
    assert 0 < listed < 1_000_000 and 0 < confirmed < 1_000_000, (listed, confirmed)


@pytest.mark.django_db
def test_a_history_of_ten_thousand_events_is_paged_newest_first(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    client = login(superuser)
    insert_events(job.id, 3)
    client.get(detail_url(job.id))  # caches what every page needs (the user's permissions)
    with CaptureQueriesContext(connection) as short:
        client.get(detail_url(job.id))
    insert_events(job.id, 10_000)
    with CaptureQueriesContext(connection) as long:
        page = client.get(detail_url(job.id))
    assert len(long) == len(short)  # one query for one page of events, however many there are
    events = page.context["events"]
    assert len(events) == EVENTS_PER_PAGE
    assert [e.id for e in events] == sorted((e.id for e in events), reverse=True)
    assert events[0].id == JobEvent.objects.filter(job=job).latest("id").id
    content = page.content.decode()
    assert "enqueued" not in content.split('id="job-history"')[1]  # the oldest row is pages away

    # Following "older" reaches the job's enqueueing, each event seen once.
    seen, url, pages = [e.id for e in events], page.context["events_older_url"], 1
    while url:
        page = client.get(detail_url(job.id) + url.split("#")[0])
        seen += [e.id for e in page.context["events"]]
        url, pages = page.context["events_older_url"], pages + 1
    assert sorted(seen, reverse=True) == seen and len(set(seen)) == 10_003
    assert pages == -(-10_003 // EVENTS_PER_PAGE)
    assert "enqueued" in page.content.decode().split('id="job-history"')[1]


@pytest.mark.django_db
@pytest.mark.parametrize("before", ["abc", "-1", "1" * 40, "²", "1\x00"])
def test_a_bad_history_page_is_a_400(
    before: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory()
    assert login(superuser).get(detail_url(job.id), {"events_before": before}).status_code == 400


@pytest.mark.django_db
def test_the_confirmation_page_lists_a_hundred_and_counts_the_rest(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    ids = [job.id for job in JobFactory.create_batch(1000, failed=True)]
    page = login(superuser).get(act_url("retry", *ids))
    content = page.content.decode()
    assert content.count('href="/admin/django_jobs/job/') - content.count("changelist") >= CONFIRM_ROWS_SHOWN
    assert len(page.context["jobs"]) == CONFIRM_ROWS_SHOWN
    assert f"and {1000 - CONFIRM_ROWS_SHOWN} more selected jobs" in content
    assert "Retry 1000 jobs" in content  # the action still applies to all of them


@pytest.mark.django_db
def test_a_read_only_user_meets_the_admins_own_403_page(login: Callable[[User | None], Client]) -> None:
    job = JobFactory(failed=True)
    page = login(staff("viewer", "view_job")).get(act_url("retry", job.id))
    assert page.status_code == 403
    assert "admin/django_jobs/job/forbidden.html" in [t.name for t in page.templates]
    content = page.content.decode()
    assert 'id="header"' in content and "django_jobs.retry_job" in content
    nobody = login(staff("nobody")).get(DASHBOARD)
    assert nobody.status_code == 403 and "django_jobs.view_job" in nobody.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("reason", "problem"), [("x\x00y", "NUL"), ("r" * 2001, "under 2000"), ("   ", "Say why")]
)
def test_a_reason_that_cannot_be_kept_is_refused(
    reason: str, problem: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    page = login(superuser).post(act_url("retry", job.id), {"ids": str(job.id), "reason": reason})
    assert page.status_code == 400 and problem in page.content.decode()
    assert Job.objects.get(id=job.id).status == JobStatus.FAILED
    assert not JobEvent.objects.filter(job=job).exists() and not LogEntry.objects.exists()


@pytest.mark.django_db
def test_failed_now_with_a_code_leaves_out_jobs_that_recovered(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    failed = JobFactory(failed=True, last_error_code="PROVIDER_5XX")
    recovered = JobFactory(completed=True, attempts=2, last_error_code="PROVIDER_5XX")
    retrying = JobFactory(attempts=1, last_error_code="PROVIDER_5XX")
    JobFactory(failed=True, last_error_code="AUTH_FAILED")
    client = login(superuser)

    def listed(**params: str) -> set[int]:
        return {job.id for job in client.get(LIST, params).context["cl"].result_list}

    assert listed(failed_code="PROVIDER_5XX") == {failed.id}
    assert listed(error_code="PROVIDER_5XX") == {failed.id, recovered.id, retrying.id}
    page = html.unescape(client.get(DASHBOARD).content.decode())
    board = " ".join(strip_tags(page).split())
    assert "failed (kept)" in board
    assert "2 jobs failed in the last 24 h and are failed still" in board
    assert "2 failed jobs are kept in all" in board
    assert "?failed_code=PROVIDER_5XX" in page


@pytest.mark.django_db
def test_the_list_sorts_by_id_only_and_pages_no_deeper_than_the_cap(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory.create_batch(3)
    client = login(superuser)
    ids = [job.id for job in client.get(LIST, {"o": "2"}).context["cl"].result_list]  # "sort by type"
    assert ids == sorted(ids, reverse=True)
    paginator = EstimatedCountPaginator(list(range(MAX_PAGES * 100)), 50)
    assert paginator.num_pages == MAX_PAGES  # the pagination links end there
    assert paginator.page(MAX_PAGES).object_list[0] == (MAX_PAGES - 1) * 50
    with pytest.raises(InvalidPage):
        paginator.page(MAX_PAGES + 1)  # the admin answers it with its "?e=1" page


# ---- an action and its audit: both or neither -------------------------------------------------


def terminate(pid: int) -> None:
    """Cut a backend from outside, as a lost network or a failover does."""
    settings = connection.settings_dict
    dsn = f"host={settings['HOST']} port={settings['PORT'] or 5432} user={settings['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cut", ["before_the_log_entry", "after_the_log_entry", "never"])
def test_the_audit_commits_with_the_action_or_not_at_all(cut: str, monkeypatch: pytest.MonkeyPatch) -> None:
    job = JobFactory(failed=True)
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    create = LogEntryManager.create

    def log_then_cut(self: LogEntryManager, *args: Any, **kwargs: Any) -> Any:
        assert connection.in_atomic_block  # the transition is written but not committed yet
        if cut == "before_the_log_entry":
            terminate(connection.connection.info.backend_pid)
        entry = create(self, *args, **kwargs)
        if cut == "after_the_log_entry":
            terminate(connection.connection.info.backend_pid)
        return entry

    # The admin's history is written where every log entry is: whoever asks for it (the
    # console, django_jobs.retry, manage.py jobs), this is the write that must share the
    # transition's transaction.
    monkeypatch.setattr(LogEntryManager, "create", log_then_cut)
    response = client.post(act_url("retry", job.id), {"ids": str(job.id), "reason": "provider fixed"})
    connection.close()  # the next query reconnects

    retried = Job.objects.get(id=job.id).status == JobStatus.PENDING
    event = JobEvent.objects.filter(job_id=job.id, kind="manual_retry").exists()
    logged = LogEntry.objects.filter(object_id=str(job.id)).exists()
    if cut == "never":
        assert response.status_code == 302 and retried and event and logged
    else:
        assert response.status_code == 500  # the operator learns it did not happen...
        assert not retried and not event and not logged  # ...and it did not
