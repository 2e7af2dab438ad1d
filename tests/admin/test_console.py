"""The operator console through Django's test client: every action × every kind of user."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import enqueue
from django_jobs.console import restore_holds
from django_jobs.console.job_actions import ACTIONS
from django_jobs.console.listing import EXACT_COUNT_LIMIT
from django_jobs.models import ExternalCall, Job, JobEvent, LiveWorker, RestoreHold
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_durable
from tests.admin.console import DASHBOARD, LIST, act_url, staff
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def job_for(action: str) -> Job:
    """A job in a state the action applies to."""
    if action == "retry":
        return JobFactory(failed=True)
    if action == "cancel":
        return JobFactory()
    if action == "wake":  # a durable job asleep for an hour
        job = enqueue("test.durable", {"run": "wake", "script": [["step", "a"], ["sleep", 3600]]})
        return run_durable(job)
    return JobFactory(status=JobStatus.NEEDS_REVIEW, attempts=1, last_error_code="LEASE_LOST")


EXPECTED_STATUS = {
    "retry": JobStatus.PENDING,
    "cancel": JobStatus.CANCELLED,
    "wake": JobStatus.PENDING,
    "resolve_completed": JobStatus.COMPLETED,
    "resolve_failed": JobStatus.FAILED,
}
PERMISSION = {name: action.permission for name, action in ACTIONS.items()}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("who", ["superuser", "granted", "other_permissions", "view_only", "anonymous"])
def test_every_action_for_every_kind_of_user(
    action: str, who: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    job = job_for(action)
    others = [p for p in {"retry_job", "cancel_job", "resolve_job", "signal_job"} if p != PERMISSION[action]]
    user = {
        "superuser": superuser,
        "granted": staff("granted", "view_job", PERMISSION[action]),
        "other_permissions": staff("others", "view_job", *others),
        "view_only": staff("viewer", "view_job"),
        "anonymous": None,
    }[who]
    before, events_before = job.status, JobEvent.objects.filter(job=job).count()
    client = login(user)
    page = client.get(act_url(action, job.id))
    assert Job.objects.get(id=job.id).status == before  # the confirmation page changes nothing
    done = client.post(act_url(action, job.id), {"ids": str(job.id), "reason": "checked with the provider"})
    job.refresh_from_db()

    if who in ("superuser", "granted"):
        assert page.status_code == 200 and b'name="reason"' in page.content
        assert done.status_code == 302
        assert job.status == EXPECTED_STATUS[action]
        event = JobEvent.objects.filter(job=job).latest("id")
        assert (event.actor, event.reason) == (user.username, "checked with the provider")  # type: ignore[union-attr]
        entry = LogEntry.objects.get(object_id=str(job.id))
        assert entry.user == user and "checked with the provider" in entry.get_change_message()
    else:
        expected = 302 if who == "anonymous" else 403  # anonymous: to the login page
        assert (page.status_code, done.status_code) == (expected, expected)
        assert job.status == before
        assert JobEvent.objects.filter(job=job).count() == events_before
        assert not LogEntry.objects.exists()


def test_cancel_of_a_running_job_is_a_request_and_audited(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(running=True)
    login(superuser).post(act_url("cancel", job.id), {"ids": str(job.id), "reason": "wrong customer"})
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested_at is not None
    assert JobEvent.objects.get(job=job).kind == EventKind.CANCEL_REQUESTED


def test_manual_retry_records_who_and_keeps_the_history(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True, attempts=5)
    login(superuser).post(act_url("retry", job.id), {"ids": str(job.id), "reason": "provider fixed"})
    job.refresh_from_db()
    assert (job.status, job.attempts, job.manual_retries, job.retried_by) == (JobStatus.PENDING, 0, 1, "root")
    assert job.retried_at is not None and job.last_error_code == "UNKNOWN"  # the last error stays visible
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.from_status, event.attempt) == (EventKind.MANUAL_RETRY, "failed", 5)


def test_retry_keeps_unique_keys_unique(login: Callable[[User | None], Client], superuser: User) -> None:
    failed = JobFactory(failed=True, unique_key="invoice:9")
    JobFactory(unique_key="invoice:9")  # a newer job with the same key is pending
    response = login(superuser).post(
        act_url("retry", failed.id), {"ids": str(failed.id), "reason": "again"}, follow=True
    )
    failed.refresh_from_db()
    assert failed.status == JobStatus.FAILED
    assert "holds its unique key" in response.content.decode()


def test_actions_are_refused_for_ineligible_jobs(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    done = JobFactory(completed=True)
    client = login(superuser)
    page = client.get(act_url("retry", done.id))
    assert "no — completed jobs are left as they are" in page.content.decode()
    client.post(act_url("retry", done.id), {"ids": str(done.id), "reason": "try"})
    done.refresh_from_db()
    assert done.status == JobStatus.COMPLETED and not JobEvent.objects.exists()


def test_every_action_needs_a_reason(login: Callable[[User | None], Client], superuser: User) -> None:
    job = JobFactory(failed=True)
    response = login(superuser).post(act_url("retry", job.id), {"ids": str(job.id), "reason": "  "})
    assert response.status_code == 400 and b"Say why" in response.content
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


@pytest.mark.parametrize("url", [act_url("retry") + "abc", act_url("retry"), act_url("explode", 1)])
def test_bad_action_requests_get_a_clear_400(
    url: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    response = login(superuser).get(url)
    assert response.status_code == 400


def test_actions_need_a_csrf_token(superuser: User) -> None:
    job = JobFactory(failed=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    response = client.post(act_url("retry", job.id), {"ids": str(job.id), "reason": "no token"})
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


def test_bulk_retry_goes_through_the_confirmation_page(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    failed = JobFactory.create_batch(3, failed=True)
    completed = JobFactory(completed=True)
    client = login(superuser)
    ids = [j.id for j in [*failed, completed]]
    response = client.post(LIST, {"action": "retry_selected", "_selected_action": ids})
    assert response.status_code == 302 and "/act/retry/?ids=" in response["Location"]
    page = client.get(response["Location"])
    assert "Retry 3 jobs" in page.content.decode()
    assert all(
        j.status == JobStatus.FAILED for j in Job.objects.filter(id__in=[f.id for f in failed])
    )  # not yet
    client.post(response["Location"], {"ids": ",".join(map(str, ids)), "reason": "provider back"})
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 3
    assert Job.objects.get(id=completed.id).status == JobStatus.COMPLETED
    assert LogEntry.objects.count() == 3


def test_view_only_staff_sees_a_read_only_console(login: Callable[[User | None], Client]) -> None:
    job = JobFactory(failed=True)
    client = login(staff("viewer", "view_job"))
    listing = client.get(LIST).content.decode()
    assert "action-checkbox" not in listing and "retry_selected" not in listing
    detail = client.get(f"{LIST}{job.id}/change/")
    assert detail.status_code == 200 and 'id="job-actions"' not in detail.content.decode()
    assert client.post(f"{LIST}{job.id}/change/", {"status": "pending"}).status_code == 403
    assert client.get(DASHBOARD).status_code == 200


def test_nobody_edits_payloads_or_statuses_through_a_form(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True, payload={"order": 1})
    client = login(superuser)
    detail = client.get(f"{LIST}{job.id}/change/").content.decode()
    assert 'name="payload"' not in detail and 'name="status"' not in detail
    assert client.post(f"{LIST}{job.id}/change/", {"payload": '{"order": 2}'}).status_code == 403
    assert client.get(f"{LIST}add/").status_code == 403
    assert client.post(f"{LIST}{job.id}/delete/", {"post": "yes"}).status_code == 403
    job.refresh_from_db()
    assert job.payload == {"order": 1} and job.status == JobStatus.FAILED


def test_staff_without_view_permission_sees_nothing(login: Callable[[User | None], Client]) -> None:
    client = login(staff("nobody"))
    assert client.get(LIST).status_code == 403
    assert client.get(DASHBOARD).status_code == 403


def test_detail_shows_payload_error_and_history(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True, payload={"order": "<b>1</b>"}, last_error="RuntimeError: boom <script>")
    JobEvent.objects.create(job=job, kind=EventKind.RETRY_SCHEDULED, error_code="PROVIDER_5XX", attempt=1)
    page = login(superuser).get(f"{LIST}{job.id}/change/").content.decode()
    assert "&lt;b&gt;1&lt;/b&gt;" in page and "<script>" not in page  # escaped
    assert "PROVIDER_5XX" in page and "Retry scheduled" in page
    assert 'id="job-actions"' in page


def test_the_job_page_shows_the_marks_of_its_external_calls(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(running=True, type="test.marked_charge")
    lost = uuid.uuid4()
    ExternalCall.objects.create(job=job, execution_id=lost, name="charge")
    ExternalCall.objects.create(
        job=job, execution_id=lost, name="refund", ended_at=timezone.now(), exception="builtins.TimeoutError"
    )
    ExternalCall.objects.create(job=job, execution_id=job.execution_id, name="charge")
    page = login(superuser).get(f"{LIST}{job.id}/change/").content.decode()
    section = page[page.index('id="job-external-calls"') : page.index('id="job-history"')]
    assert "goes to <strong>needs_review</strong>" in section
    rows = section.split("<tr>")[2:]  # newest first
    assert "in progress" in rows[0] and "(running now)" in rows[0]
    assert "raised builtins.TimeoutError" in rows[1]
    assert "no end recorded: its execution was lost during the call" in rows[2]
    assert str(lost)[:8] in rows[2]


def test_an_exception_class_stored_under_an_old_module_reads_as_its_public_name(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(running=True, type="test.marked_charge")
    # Both stored before the package's layout moved: an external call's end, an event's details.
    ExternalCall.objects.create(
        job=job, execution_id=uuid.uuid4(), name="charge", ended_at=timezone.now(),
        exception="django_jobs.context.LeaseLost",
    )  # fmt: skip
    JobEvent.objects.create(
        job=job, kind=EventKind.RETRY_SCHEDULED, error_code="PROVIDER_5XX", attempt=1,
        details={"retry_in": 1.0, "exception": "django_jobs.errors.RetryableError"},
    )  # fmt: skip
    page = login(superuser).get(f"{LIST}{job.id}/change/").content.decode()
    calls = page[page.index('id="job-external-calls"') : page.index('id="job-history"')]
    assert "raised django_jobs.LeaseLost" in calls
    history = page[page.index('id="job-history"') :]
    assert "django_jobs.RetryableError" in history
    assert "django_jobs.context" not in page and "django_jobs.errors" not in page


def test_the_job_page_says_why_a_job_is_not_running(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    from django_jobs import pause_queue, transitions

    client = login(superuser)

    def panel(job: Job) -> str:
        page = client.get(f"{LIST}{job.id}/change/").content.decode()
        assert "Claimable now" not in page  # one answer, not two
        return page[page.index('id="job-diagnosis"') : page.index("Priority:")]

    due = JobFactory(available_at=timezone.now() - dt.timedelta(seconds=5))
    assert "No live worker serves its queue default" in panel(due)
    transitions.report_worker(
        worker_id="web-1:42", hostname="web-1", pid=42, queues="", concurrency=2, running=0, processed=0,
        job_types={"test.noop": 1, "test.versioned": 3},
    )  # fmt: skip
    assert 'data-reason="claimable"' in panel(due) and "web-1:42 could" in panel(due)
    later = JobFactory(available_at=timezone.now() + dt.timedelta(hours=2))
    assert 'data-reason="delayed"' in panel(later) and "It was enqueued to run later: it is due in" in panel(
        later
    )
    foreign = JobFactory(type="billing.unknown_here", available_at=timezone.now() - dt.timedelta(seconds=5))
    assert "runs job type billing.unknown_here" in panel(foreign)
    newer = JobFactory(
        type="test.versioned", version=4, available_at=timezone.now() - dt.timedelta(seconds=5)
    )
    assert "payload version 4 is newer than any live worker of queue default reads" in panel(newer)
    paused = JobFactory(queue="reports", available_at=timezone.now() - dt.timedelta(seconds=5))
    pause_queue("reports", actor="ops", reason="maintenance")
    assert "Its queue reports is paused, by ops" in panel(paused)
    failed = panel(JobFactory(failed=True))
    assert "What became of this job" in failed and "It failed at" in failed and "UNKNOWN" in failed


def test_a_job_whose_type_marks_no_call_has_no_calls_section(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    page = login(superuser).get(f"{LIST}{job.id}/change/").content.decode()
    assert 'id="job-external-calls"' not in page and 'id="job-history"' in page


def test_search_matches_ids_types_keys_and_codes_exactly(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    a = JobFactory(type="test.flaky", unique_key="order:7")
    b = JobFactory(failed=True, last_error_code="AUTH_FAILED")
    client = login(superuser)

    def found(q: str) -> set[int]:
        return set(client.get(LIST, {"q": q}).context["cl"].result_list.values_list("id", flat=True))

    assert found(str(a.id)) == {a.id}
    assert found("order:7") == {a.id}
    assert found("test.flaky") == {a.id}
    assert found("AUTH_FAILED") == {b.id}
    assert found("flaky") == set()  # exact matches only: each one is an index lookup


def test_filters_list_their_choices_from_the_indexes(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(queue="mail", type="test.flaky", failed=True, last_error_code="AUTH_FAILED")
    JobFactory(queue="reports")
    page = login(superuser).get(LIST).content.decode()
    for choice in (
        "?queue=mail",
        "?queue=reports",
        "?type=test.flaky",
        "?error_code=AUTH_FAILED",
        "?attention=stale",
    ):
        assert choice in page


def test_stale_running_filter(login: Callable[[User | None], Client], superuser: User) -> None:
    stale = JobFactory(running_stale=True)
    JobFactory(running=True)
    result = login(superuser).get(LIST, {"attention": "stale"}).context["cl"].result_list
    assert [j.id for j in result] == [stale.id]


def test_list_queries_do_not_grow_with_the_rows(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    client = login(superuser)
    JobFactory.create_batch(5, failed=True)
    with CaptureQueriesContext(connection) as few:
        client.get(LIST)
    JobFactory.create_batch(60, failed=True)
    with CaptureQueriesContext(connection) as many:
        assert client.get(LIST).status_code == 200
    assert len(many) == len(few) <= 14


def test_dashboard_queries_are_a_fixed_number(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    client = login(superuser)
    with CaptureQueriesContext(connection) as empty:
        client.get(DASHBOARD)
    for queue in ("a", "b", "c"):
        JobFactory.create_batch(3, queue=queue)
        JobFactory(queue=queue, failed=True)
        JobFactory(queue=queue, running_stale=True)
    with CaptureQueriesContext(connection) as busy:
        page = client.get(DASHBOARD)
    assert len(busy) == len(empty) <= 20
    content = page.content.decode()
    assert 'class="djj-chart"' in content and 'id="queues"' in content
    assert "?attention=stale&queue=a" in content  # stale jobs of queue a link to the list


def test_large_lists_are_not_counted_row_by_row(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobs_job"
            " (queue, type, version, payload, status, priority, attempts, max_attempts)"
            " SELECT 'default', 'test.noop', 1, '{}', 'completed', 0, 1, 5 FROM generate_series(1, %s)",
            [EXACT_COUNT_LIMIT * 2],
        )
        cursor.execute("ANALYZE django_jobs_job")
    with CaptureQueriesContext(connection) as queries:
        page = login(superuser).get(LIST)
    assert page.status_code == 200
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "django_jobs_job" in q["sql"]]
    assert counts == []  # the planner's estimate, not a count of 20,000 rows
    assert page.context["cl"].result_count > EXACT_COUNT_LIMIT


def test_stale_label_follows_the_database_clock(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    JobFactory(running_stale=True)
    JobFactory(running=True)
    content = login(superuser).get(LIST).content.decode()
    # Decided by the database's now(), as the reaper and the stale filter decide it.
    assert content.count('djj-running">stale</span>') == 1
    assert content.count('djj-running">running</span>') == 1


def test_an_action_needs_the_view_permission_too(login: Callable[[User | None], Client]) -> None:
    job = JobFactory(failed=True)
    retry_only = staff("retry-only", "retry_job")  # may retry, may not see jobs
    response = login(retry_only).post(act_url("retry", job.id), {"ids": str(job.id), "reason": "r"})
    assert response.status_code == 403
    assert Job.objects.get(id=job.id).status == JobStatus.FAILED


@pytest.mark.parametrize(
    ("ids", "status"),
    [
        ("987654321", 404),  # no such job
        ("99999999999999999999999", 400),  # past a bigint: not a job id
        ("-5", 400),
        ("²", 400),
        ("1\x00", 400),
    ],
)
def test_an_action_on_jobs_that_cannot_exist_is_a_clear_error(
    ids: str, status: int, login: Callable[[User | None], Client], superuser: User
) -> None:
    response = login(superuser).get("/admin/django_jobs/job/act/retry/", {"ids": ids})
    assert response.status_code == status


@pytest.mark.parametrize("term", ["²", "#²", "٣", "9" * 40, "#-1", "\x00"])
def test_search_with_odd_digits_gives_a_page(
    term: str, login: Callable[[User | None], Client], superuser: User
) -> None:
    assert login(superuser).get(LIST, {"q": term}).status_code == 200


def test_a_silent_worker_holds_only_what_is_still_running_in_its_name(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    long_ago = timezone.now() - dt.timedelta(minutes=10)
    for worker_id in ("web-1:1:dead", "web-2:2:dead"):
        LiveWorker.objects.create(
            worker_id=worker_id, hostname=worker_id[:5], pid=1, queues="", concurrency=4, running=1,
            processed=10, started_at=long_ago, last_seen_at=long_ago,
        )  # fmt: skip
    JobFactory(running_stale=True, worker_id="web-2:2:dead")  # not recovered yet
    JobFactory(completed=True, worker_id="web-1:1:dead")  # recovered and completed elsewhere
    workers = {w["worker"].worker_id: w for w in login(superuser).get(DASHBOARD).context["board"].workers}
    # Each reported "holding 1" before it went silent.
    assert (workers["web-1:1:dead"]["holding"], workers["web-2:2:dead"]["holding"]) == (0, 1)


def test_a_retried_job_forgets_when_it_failed(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    job = JobFactory(failed=True)
    login(superuser).post(act_url("retry", job.id), {"ids": str(job.id), "reason": "fixed"})
    job.refresh_from_db()
    assert (job.status, job.failed_at, job.finished_at) == (JobStatus.PENDING, None, None)
    assert JobEvent.objects.filter(job=job, kind=EventKind.MANUAL_RETRY).exists()  # the history keeps it


def test_an_open_restore_hold_is_a_banner_and_its_jobs_a_filter(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    client = login(superuser)
    assert 'id="restore-hold"' not in client.get(DASHBOARD).content.decode()
    held = JobFactory(type="test.unsafe")
    running = JobFactory(type="test.unsafe", running=True)
    inside = JobFactory(type="test.noop")
    done = JobFactory(type="test.unsafe", status=JobStatus.COMPLETED)
    Job.objects.filter(id__in=[held.id, running.id, inside.id, done.id]).update(
        created_at=timezone.now() - dt.timedelta(minutes=5)
    )
    assert listed(client, "held") == []  # no hold open: nothing is held
    hold = restore_holds.declare(actor="ops", reason="restored <b>last night's</b> backup")
    later = JobFactory(type="test.unsafe")  # enqueued under the hold: not held by it

    page = client.get(DASHBOARD).content.decode()
    assert 'id="restore-hold"' in page and f"Restore hold {hold}" in page
    assert "restored &lt;b&gt;last night&#x27;s&lt;/b&gt; backup" in page  # escaped
    assert "?restore=held" in page and f"jobsrestore release --hold {hold}" in page
    assert listed(client, "held") == sorted([held.id, running.id])

    restore_holds.release(actor="ops", reason="providers checked")
    assert 'id="restore-hold"' not in client.get(DASHBOARD).content.decode()
    assert listed(client, "held") == []
    assert listed(client, "settled") == [held.id]  # parked: test.unsafe cannot reconcile
    assert later.id not in listed(client, "settled")


def listed(client: Client, restore: str) -> list[int]:
    page = client.get(LIST, {"restore": restore})
    assert page.status_code == 200
    return sorted(job.id for job in page.context["cl"].result_list)


RESTORE = "/admin/django_jobs/job/restore/{}/"


def test_declare_and_release_from_the_console_are_audited_and_bad_input_changes_nothing(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    viewer = login(staff("viewer", "view_job"))
    assert viewer.get(RESTORE.format("declare")).status_code == 403  # needs release_restore_hold
    client = login(superuser)
    assert "Declare a restore…" in client.get(DASHBOARD).content.decode()
    assert client.get(RESTORE.format("nope")).status_code == 400
    assert client.post(RESTORE.format("declare"), {"reason": " "}).status_code == 400
    assert not RestoreHold.objects.exists()
    page = client.post(RESTORE.format("declare"), {"reason": "put back last night's copy"})
    assert page.status_code == 302
    hold = RestoreHold.objects.get()
    assert (hold.kind, hold.opened_by, hold.evidence) == ("declared", "root", "put back last night's copy")

    sent = JobFactory(type="test.provider_notice", payload={})
    unsent = JobFactory(type="test.provider_notice", payload={})
    charge = JobFactory(type="test.provider_charge", payload={})
    Job.objects.filter(id__in=[sent.id, unsent.id, charge.id]).update(
        created_at=timezone.now() - dt.timedelta(minutes=5)
    )
    page = client.get(RESTORE.format("release")).content.decode()
    assert f"restore hold {hold.id}" in page and "test.provider_notice</code>: 2 pending" in page
    for bad in ({"done": "12abc"}, {"done": "0"}, {"done": "99999999999999999999"}, {"done": "424242"},
                {"done": str(sent.id), "not_done": str(sent.id)}, {"hold": str(hold.id + 1)}):  # fmt: skip
        page = client.post(RESTORE.format("release"), {"reason": "checked", "hold": str(hold.id), **bad})
        assert page.status_code == 400, bad
        assert 'class="errornote"' in page.content.decode()
    assert RestoreHold.objects.get().released_at is None and not JobEvent.objects.exists()

    answers = {"done": f"{sent.id},", "not_done": f" {unsent.id} "}
    page = client.post(
        RESTORE.format("release"), {"reason": "provider checked", "hold": str(hold.id), **answers}
    )
    assert page.status_code == 302
    hold.refresh_from_db()
    assert (hold.released_by, hold.release_reason) == ("root", "provider checked")
    settled = {"to_reconcile": 1, "to_review": 0, "running": 0, "waiting": 0, "done": 1, "not_done": 1}
    assert hold.settled == settled
    statuses = dict(Job.objects.values_list("id", "status"))
    assert [statuses[j.id] for j in (sent, unsent, charge)] == ["completed", "pending", "pending"]
    logged = LogEntry.objects.filter(object_id=str(hold.id), change_message="released: provider checked")
    assert logged.exists()


def test_the_job_page_says_a_job_expired_and_shows_its_deadline(
    login: Callable[[User | None], Client], superuser: User
) -> None:
    from django.db.models.functions import Now

    from django_jobs import enqueue
    from django_jobs.maintenance import reaper

    client = login(superuser)
    job = enqueue("test.noop", {}, expires_in=600)
    Job.objects.filter(id=job.id).update(start_by=Now() - dt.timedelta(seconds=1))
    reaper.run_once()
    page = client.get(f"{LIST}{job.id}/change/").content.decode()
    assert 'data-reason="expired"' in page and "start-by deadline" in page
    assert "Start by:" in page and "EXPIRED" in page
