"""The operator console in a real browser, as the on-call engineer meets it during an incident.

Real jobs run first (real workers, a fake provider that answers 503 and 429, invalid payloads, a
poison job), on top of history made with the factory (an hour of completions, a day of failures,
jobs past their retention); then a worker goes silent, its job's lease expires, an unsafe job is
parked for review by the real reaper, and emails pile up past their SLA. Chromium then logs in
through the admin, reads the dashboard, filters the list, opens a failed job, retries it with a
reason, and a read-only member of staff checks that the same retry is refused to them.

The browser is Debian's chromium (never a downloaded one). Django's ORM is used only before the
browser starts and after it stops: Playwright's sync API keeps an event loop marked as running
between its calls, and Django refuses database calls from within a running loop.

The screenshots of docs/operations/console.md come from this test. It always takes them (into a
temporary folder); to refresh the committed ones, run it with DJANGO_JOBS_SCREENSHOTS=docs/images.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from playwright.sync_api import Browser, Page, expect, sync_playwright

from django_jobs import enqueue, enqueue_many
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent, LiveWorker
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_until_settled
from testproject.demo.models import Invoice
from testproject.demo.provider import FakeProvider
from tests.factories import JobFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IMAGES = Path(
    os.environ.get("DJANGO_JOBS_SCREENSHOTS") or Path(tempfile.gettempdir()) / "django-jobs-screenshots"
)
PASSWORD = "correct horse battery staple"
REASON = "Ledger file fixed upstream (row 1 had quantity 0); re-importing it."
RECIPIENT = "cfo@example.com"
SHARE_TOKEN = "rpt_9f8e7d6c5b4a"

LIST = "/admin/django_jobs/job/"
DASHBOARD = "/admin/django_jobs/job/dashboard/"


@dataclass
class Incident:
    poison: int  # the failed job the operator retries
    invalid_report: int  # a failed job the read-only user tries to retry
    needs_review: int


# ---- the history the console shows ---------------------------------------------------------------


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now: dt.datetime = cursor.fetchone()[0]
        return now


def make_history(now: dt.datetime) -> None:
    """A week of history as the workers would have left it, oldest first (ids grow with time):
    completed jobs past their retention, a day of failures, an hour of completed jobs."""
    for i, days in enumerate((9, 8.5, 8)):
        finished = now - dt.timedelta(days=days)
        JobFactory(
            completed=True, type="demo.send_welcome_email", queue="emails", payload={"user_id": 70_000 + i},
            created_at=finished, available_at=finished, started_at=finished, completed_at=finished,
            finished_at=finished,
        )  # fmt: skip
    failures = [
        (19, "demo.sync_crm_contact", {"contact_id": "crm-3900"}, 5, "PROVIDER_5XX",
         "provider answered 503 on /operations/crm-3900"),
        (7.5, "demo.sync_crm_contact", {"contact_id": "crm-3910"}, 5, "PROVIDER_5XX",
         "provider answered 503 on /operations/crm-3910"),
        (4, "demo.charge_invoice", {"invoice": "INV-2024-0655"}, 1, "AUTH_FAILED",
         "provider refused our credentials on /operations/charge-INV-2024-0655"),
        (2.2, "demo.sync_crm_contact", {"contact_id": "crm-3920"}, 5, "PROVIDER_5XX",
         "provider answered 503 on /operations/crm-3920"),
    ]  # fmt: skip
    for hours, job_type, payload, attempts, code, error in failures:
        finished = now - dt.timedelta(hours=hours)
        JobFactory(
            failed=True, type=job_type, queue="integrations", payload=payload, attempts=attempts,
            last_error_code=code, last_error=error, created_at=finished - dt.timedelta(minutes=20),
            available_at=finished, started_at=finished, failed_at=finished, finished_at=finished,
        )  # fmt: skip
    rng = random.Random(20240611)
    kinds: list[tuple[str, str, float, float, Any]] = [
        ("demo.send_welcome_email", "emails", 0.02, 0.15, lambda i: {"user_id": 81_000 + i}),
        ("demo.sync_crm_contact", "integrations", 0.2, 1.8, lambda i: {"contact_id": f"crm-{4100 + i}"}),
        ("demo.charge_invoice", "integrations", 0.3, 2.5, lambda i: {"invoice": f"INV-2024-{700 + i}"}),
        ("demo.generate_report", "reports", 1.5, 9.0, lambda i: {"report_id": 300 + i}),
    ]
    completed = []
    for i in range(160):
        job_type, queue, low, high, payload = rng.choices(kinds, weights=[8, 4, 3, 1])[0]
        finished = now - dt.timedelta(seconds=rng.triangular(30, 3570, 900))
        started = finished - dt.timedelta(seconds=rng.uniform(low, high))
        created = started - dt.timedelta(seconds=rng.uniform(0.05, 2))
        completed.append((created, started, finished, job_type, queue, payload(i)))
    for created, started, finished, job_type, queue, payload in sorted(completed, key=lambda c: c[0]):
        JobFactory(
            completed=True, type=job_type, queue=queue, payload=payload, created_at=created,
            available_at=created, started_at=started, completed_at=finished, finished_at=finished,
            worker_id=rng.choice(["web-1:4211:a81c", "web-2:4187:9f3c"]), execution_id=uuid.uuid4(),
        )  # fmt: skip


def run_real_jobs(provider: FakeProvider) -> tuple[int, int]:
    """Enqueue and run real jobs: retried and completed, failed permanently, poisoned."""
    for i in range(2):
        Invoice.objects.create(number=f"INV-2024-{900 + i}", amount_cents=4_900 + 1_000 * i)
    enqueue_many("demo.send_welcome_email", [{"user_id": 90_000 + i} for i in range(10)])
    enqueue_many("demo.sync_crm_contact", [{"contact_id": f"crm-{5000 + i}"} for i in range(3)])
    enqueue_many("demo.charge_invoice", [{"invoice": f"INV-2024-{900 + i}"} for i in range(2)])
    enqueue_many("demo.generate_report", [{"report_id": 410 + i} for i in range(3)])
    invalid = enqueue(  # its recipient is declared sensitive; its token matches the default patterns
        "demo.generate_report", {"report_id": "last-week", "recipient": RECIPIENT, "share_token": SHARE_TOKEN}
    )
    enqueue("demo.generate_report", {})
    poison = enqueue(
        "demo.import_legacy_file",
        {"file": "imports/ledger-2019.csv", "rows": [{"amount": 129.5, "quantity": 0}]},
    )
    run_until_settled(concurrency=2, timeout=60)
    assert provider.requests, "the jobs did call the provider"
    return poison.id, invalid.id


def make_incident(now: dt.datetime) -> int:
    """A worker went silent: its job's lease expired, emails wait past their SLA; an unsafe job
    lost earlier was parked for review by the reaper. Returns the parked job's id."""
    unsafe = JobFactory(
        running_stale=True, type="test.unsafe_send", queue="integrations",
        payload={"transfer": "TR-88412", "amount_cents": 125_000}, worker_id="web-2:4187:9f3c",
        created_at=now - dt.timedelta(minutes=61), available_at=now - dt.timedelta(minutes=61),
    )  # fmt: skip
    assert reaper.recover() == {JobStatus.NEEDS_REVIEW: 1}
    JobFactory(
        running=True, type="demo.sync_crm_contact", queue="integrations", payload={"contact_id": "crm-5120"},
        attempts=2, worker_id="web-2:4187:9f3c", created_at=now - dt.timedelta(minutes=9),
        available_at=now - dt.timedelta(seconds=151), started_at=now - dt.timedelta(seconds=150),
        heartbeat_at=now - dt.timedelta(seconds=125), lease_expires_at=now - dt.timedelta(seconds=65),
    )  # fmt: skip
    JobFactory(
        running=True, type="demo.generate_report", queue="reports", worker_id="web-1:4211:a81c",
        payload={"report_id": 442, "period": "2024-Q2"}, progress={"done": 38, "total": 120},
        created_at=now - dt.timedelta(seconds=49), available_at=now - dt.timedelta(seconds=49),
        started_at=now - dt.timedelta(seconds=48), heartbeat_at=now - dt.timedelta(seconds=3),
        lease_expires_at=now + dt.timedelta(seconds=57),
    )  # fmt: skip
    for i in range(9):  # the emails worker is silent: they wait, the oldest past the SLA
        due = now - dt.timedelta(seconds=75 * (9 - i))
        JobFactory(type="demo.send_welcome_email", queue="emails", payload={"user_id": 91_000 + i},
                   created_at=due, available_at=due)  # fmt: skip
    JobFactory(type="demo.generate_report", queue="reports", payload={"report_id": 450}, available_at=now)
    for minutes in (10, 45):  # scheduled for later
        JobFactory(
            type="demo.generate_report", queue="reports", payload={"report_id": 450 + minutes},
            available_at=now + dt.timedelta(minutes=minutes),
        )  # fmt: skip
    LiveWorker.objects.create(
        worker_id="web-1:4211:a81c", hostname="web-1", pid=4211, queues="reports,integrations",
        concurrency=4, running=1, processed=1_873, started_at=now - dt.timedelta(hours=3),
        last_seen_at=now - dt.timedelta(seconds=4),
    )  # fmt: skip
    LiveWorker.objects.create(
        worker_id="web-2:4187:9f3c", hostname="web-2", pid=4187, queues="emails,integrations",
        concurrency=4, running=1, processed=2_410, started_at=now - dt.timedelta(hours=3),
        last_seen_at=now - dt.timedelta(seconds=130),
    )  # fmt: skip
    return unsafe.id


@pytest.fixture
def incident(provider: FakeProvider) -> Incident:
    now = db_now()
    make_history(now)
    poison, invalid = run_real_jobs(provider)
    parked = make_incident(db_now())
    assert Job.objects.get(id=poison).status == JobStatus.FAILED
    return Incident(poison=poison, invalid_report=invalid, needs_review=parked)


@pytest.fixture
def users(settings: Any) -> dict[str, User]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins
    alice = User.objects.create_superuser("alice", "alice@example.com", PASSWORD, first_name="Alice")
    bob = User.objects.create_user("bob", "bob@example.com", PASSWORD, is_staff=True, first_name="Bob")
    view_job = Permission.objects.get(content_type__app_label="django_jobs", codename="view_job")
    bob.user_permissions.add(view_job)
    return {"alice": alice, "bob": bob}


# ---- the browser -------------------------------------------------------------------------------


class Console:
    """A page of the admin, with what went wrong on the way recorded."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.context = browser.new_context(base_url=base_url, viewport={"width": 1440, "height": 900})
        self.context.set_default_timeout(15_000)
        self.page: Page = self.context.new_page()
        self.static_failures: list[str] = []
        self.static_loaded: list[str] = []
        self.script_errors: list[str] = []
        self.page.on("response", self._record)
        self.page.on("pageerror", lambda error: self.script_errors.append(str(error)))

    def _record(self, response: Any) -> None:
        if "/static/" in response.url:
            (self.static_loaded if response.ok else self.static_failures).append(response.url)

    def log_in(self, username: str) -> None:
        page = self.page
        page.goto("/admin/login/?next=" + DASHBOARD)
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(re.compile(re.escape(DASHBOARD) + "$"))
        expect(page.locator("#user-tools")).to_contain_text(username.capitalize())

    def log_out(self) -> None:
        self.page.locator("#logout-form button").click()
        expect(self.page.locator("#content")).to_contain_text("Logged out")

    def filter_by(self, title: str, choice: str) -> None:
        self.page.locator(f'#changelist-filter details[data-filter-title="{title}"]').get_by_role(
            "link", name=choice, exact=True
        ).click()

    def shoot(self, name: str) -> None:
        IMAGES.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(IMAGES / f"console-{name}.png"), full_page=True)


def test_on_call_walks_from_the_dashboard_to_a_retry(
    live_server: Any, incident: Incident, users: dict[str, User]
) -> None:
    if not Path(CHROMIUM).exists():  # ./run test installs it where it may: CI never skips this test
        missing = f"{CHROMIUM} is missing: apt-get install chromium"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            walk_through_the_console(browser, live_server.url, incident)
        finally:
            browser.close()

    # What the clicks left behind (the ORM is usable again once the browser is gone).
    poison = Job.objects.get(id=incident.poison)
    assert (poison.status, poison.attempts, poison.manual_retries, poison.retried_by) == (
        JobStatus.PENDING, 0, 1, "alice",
    )  # fmt: skip
    event = JobEvent.objects.filter(job_id=poison.id).order_by("id").last()
    assert event is not None
    assert (event.kind, event.from_status, event.to_status, event.actor, event.reason) == (
        EventKind.MANUAL_RETRY, JobStatus.FAILED, JobStatus.PENDING, "alice", REASON,
    )  # fmt: skip
    entry = LogEntry.objects.get(object_id=str(poison.id))
    assert (entry.user_id, entry.action_flag) == (users["alice"].id, CHANGE)
    assert REASON in entry.change_message
    # The read-only user's attempts changed nothing.
    assert Job.objects.get(id=incident.invalid_report).status == JobStatus.FAILED
    assert not JobEvent.objects.filter(kind=EventKind.MANUAL_RETRY).exclude(job_id=poison.id).exists()
    assert LogEntry.objects.count() == 1


def walk_through_the_console(browser: Browser, base_url: str, incident: Incident) -> None:
    console = Console(browser, base_url)
    page = console.page

    # The dashboard, first: queues, charts, workers, SLA.
    console.log_in("alice")
    expect(page.locator("h1")).to_have_text("Jobs dashboard")
    page.locator("#toggle-nav-sidebar").click()  # more room for the tables; the admin remembers it
    expect(page.locator("#nav-sidebar")).to_be_hidden()
    queues = page.locator("#queues tbody tr")
    # The three busy queues, and the idle one the test types name (it can be paused ahead).
    expect(queues.locator("td:first-child")).to_have_text(["default", "emails", "integrations", "reports"])
    expect(queues.filter(has_text="emails")).to_contain_text("9")
    # integrations: a stale running job, failed jobs and one to review, each a link in red
    expect(queues.filter(has_text="integrations").locator("a.djj-warn")).to_have_count(3)
    expect(page.locator("#throughput svg.djj-chart rect")).to_have_count(60)
    expect(page.locator("#failures svg.djj-chart")).to_contain_text("PAYLOAD_INVALID")
    expect(page.locator("#throughput")).to_contain_text(re.compile(r"Retry rate, last hour: \d+ %"))
    expect(page.locator("#durations tbody tr")).to_have_count(4)
    expect(page.locator("#workers")).to_contain_text("silent for")
    expect(page.locator("#sla")).to_contain_text("demo.send_welcome_email")
    expect(page.locator("#retention")).to_contain_text("completed")
    # The admin's own stylesheet was served and applied: the screenshots show the real console.
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).backgroundColor") not in (
        "rgba(0, 0, 0, 0)",
        "transparent",
    )
    console.shoot("dashboard")

    # The list: filter by queue for a realistic mix, then every failed job.
    page.locator(".breadcrumbs").get_by_role("link", name="Jobs").click()
    expect(page.locator("#result_list")).to_be_visible()
    console.filter_by("queue", "reports")
    expect(page).to_have_url(re.compile(r"\?queue=reports$"))
    statuses = page.locator("#result_list .djj-status")
    expect(statuses.filter(has_text="running")).to_have_count(1)
    expect(statuses.filter(has_text="pending")).to_have_count(3)
    expect(statuses.filter(has_text="failed")).to_have_count(3)
    expect(statuses.filter(has_text="completed").first).to_be_visible()
    console.shoot("list")
    console.filter_by("queue", "All")
    console.filter_by("status", "Failed")
    expect(page).to_have_url(re.compile(r"\?status=failed$"))
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(7)
    expect(page.locator("#result_list .djj-status")).to_have_text(["failed"] * 7)
    expect(page.locator("#result_list .field-last_error_code")).to_contain_text(
        ["UNKNOWN", "PAYLOAD_INVALID", "PAYLOAD_INVALID"]
    )

    # A failed job: payload, sanitized error, attempts, history; then the retry.
    rows.filter(has_text="demo.import_legacy_file").get_by_role("link", name=str(incident.poison)).click()
    detail = rf"{LIST}{incident.poison}/change/"
    expect(page).to_have_url(re.compile(detail + r"\?_changelist_filters=status%3Dfailed$"))
    expect(page.locator(".field-status .readonly")).to_have_text("Failed")
    expect(page.locator(".field-payload_pretty")).to_contain_text("imports/ledger-2019.csv")
    expect(page.locator(".field-last_error_pretty .djj-error")).to_contain_text("ZeroDivisionError")
    history = page.locator("#job-history tbody tr")
    expect(history).to_have_count(4)  # newest first: the failure, two retries, the enqueueing
    expect(history.nth(0)).to_contain_text("running → failed")
    expect(history.nth(1)).to_contain_text("Retry scheduled")
    expect(history.nth(2)).to_contain_text("Retry scheduled")
    expect(history.nth(3)).to_contain_text("enqueued")
    actions = page.locator("#job-actions a.button")
    expect(actions).to_have_text(["Retry…"])  # a failed job cannot be cancelled or resolved
    console.shoot("detail")
    actions.click()
    expect(page.locator("h1")).to_have_text("Retry: confirm")
    expect(page.locator("#content-main table")).to_contain_text(f"#{incident.poison}")
    submit = page.get_by_role("button", name="Retry 1 job")
    submit.click()  # without a reason: the browser refuses to send the form
    expect(page.locator("#id_reason:invalid")).to_have_count(1)
    expect(page.locator("h1")).to_have_text("Retry: confirm")
    page.fill("#id_reason", REASON)
    submit.click()
    expect(page).to_have_url(re.compile(detail + "$"))
    expect(page.locator(".messagelist")).to_contain_text("Retry: 1 job(s) done.")
    expect(page.locator(".field-status .readonly")).to_have_text("Pending")
    expect(page.locator(".field-retried_by .readonly")).to_have_text("alice")
    retried = history.first
    expect(retried).to_contain_text("Retried by an operator")
    expect(retried).to_contain_text("failed → pending")
    expect(retried).to_contain_text("alice")
    expect(retried).to_contain_text(REASON)
    # Alice may see sensitive payload fields (a superuser has every permission).
    page.goto(f"{LIST}{incident.invalid_report}/change/")
    expect(page.locator(".field-payload_pretty")).to_contain_text(RECIPIENT)
    expect(page.locator(".field-payload_pretty")).to_contain_text(SHARE_TOKEN)
    console.log_out()

    # A member of staff who may look but not retry, nor see sensitive fields.
    console.log_in("bob")
    page.goto(f"{LIST}{incident.invalid_report}/change/")
    expect(page.locator(".field-status .readonly")).to_have_text("Failed")
    payload = page.locator(".field-payload_pretty")
    expect(payload).to_contain_text('"report_id": "last-week"')
    expect(payload).to_contain_text('"recipient": "••••••••"')
    expect(payload).to_contain_text('"share_token": "••••••••"')
    assert RECIPIENT not in page.content() and SHARE_TOKEN not in page.content()
    console.shoot("masked")
    expect(page.locator("#job-history")).to_be_visible()
    expect(page.locator("#job-actions")).to_have_count(0)
    page.goto(LIST)
    expect(page.locator("#result_list tbody tr").first).to_be_visible()
    expect(page.locator("#result_list input.action-select")).to_have_count(0)
    expect(page.locator("select[name=action]")).to_have_count(0)
    act = f"/admin/django_jobs/job/act/retry/?ids={incident.invalid_report}"
    refused = page.goto(act)
    assert refused is not None and refused.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")  # the admin's own page, not a bare 403
    expect(page.locator("#content-main")).to_contain_text("django_jobs.retry_job")
    csrf = next(c["value"] for c in console.context.cookies() if c["name"] == "csrftoken")
    posted = page.request.post(
        base_url + act,
        form={"ids": str(incident.invalid_report), "reason": "let me", "csrfmiddlewaretoken": csrf},
        headers={"X-CSRFToken": csrf},
        max_redirects=0,
    )
    assert posted.status == 403 and "CSRF" not in posted.text()  # refused for the permission

    assert console.static_loaded and not console.static_failures, console.static_failures
    assert not console.script_errors, console.script_errors
    console.context.close()
