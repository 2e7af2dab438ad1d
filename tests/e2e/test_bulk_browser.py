"""An incident's clean-up in a real browser: forty jobs failed when a provider went down; once it
is back, the on-call engineer filters the list by the error, retries every matching job with a
reason at a gentle pace, and watches the operation finish on its own page, while a real worker
carries it out. A member of staff who may only look sees no such action, and a POST forged with
their valid session and CSRF token is refused with a 403, changing nothing.

The browser is Debian's chromium, as in ``test_console_browser``; the ORM is used only before
the browser starts and after it stops.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Browser, expect, sync_playwright

from django_jobs.models import BulkOperation, BulkState, Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.db.inprocess import BackgroundWorker
from tests.e2e.test_console_browser import CHROMIUM, CHROMIUM_ARGS, LIST, PASSWORD, Console, db_now
from tests.factories import JobFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CODE = "PROVIDER_5XX"
FAILED = 40
REASON = "Provider back since 14:20 (status page INC-2231); retrying what failed meanwhile."


@pytest.fixture
def outage() -> list[int]:
    """Forty CRM syncs failed with the provider's 5xx over the last two hours; other failures
    and completed jobs around them."""
    now = db_now()
    ids = []
    for i in range(FAILED):
        finished = now - dt.timedelta(minutes=3 * i)
        job = JobFactory(
            failed=True, type="demo.sync_crm_contact", queue="integrations",
            payload={"contact_id": f"crm-{7000 + i}"}, last_error_code=CODE,
            last_error="provider answered 503", finished_at=finished, failed_at=finished,
        )  # fmt: skip
        ids.append(job.id)
    JobFactory(failed=True, type="demo.charge_invoice", queue="integrations", last_error_code="AUTH_FAILED")
    for _ in range(5):
        JobFactory(completed=True, type="demo.sync_crm_contact", queue="integrations")
    return ids


@pytest.fixture
def users(settings: Any) -> dict[str, User]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    alice = User.objects.create_superuser("alice", "alice@example.com", PASSWORD, first_name="Alice")
    bob = User.objects.create_user("bob", "bob@example.com", PASSWORD, is_staff=True, first_name="Bob")
    bob.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="view_job")
    )
    return {"alice": alice, "bob": bob}


def test_on_call_retries_every_job_an_outage_failed(
    live_server: Any, outage: list[int], users: dict[str, User]
) -> None:
    if not Path(CHROMIUM).exists():
        missing = f"{CHROMIUM} is missing: apt-get install chromium"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    # A worker of the default queue only: it carries the operation out, and leaves the retried
    # jobs (queue integrations) pending, as they were left.
    with BackgroundWorker(queues=["default"]), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            retry_all_matching(browser, live_server.url)
        finally:
            browser.close()

    operation = BulkOperation.objects.get()
    assert (operation.state, operation.done, operation.skipped, operation.total) == (
        BulkState.DONE,
        FAILED,
        0,
        FAILED,
    )
    assert (operation.actor, operation.reason, operation.pace) == ("alice", REASON, 20)
    assert operation.filter == {"status": "failed", "code": CODE}
    retried = Job.objects.filter(id__in=outage)
    assert set(retried.values_list("status", "manual_retries", "retried_by")) == {
        (JobStatus.PENDING, 1, "alice")
    }
    events = JobEvent.objects.filter(details__operation=operation.id)
    assert sorted(events.values_list("job_id", flat=True)) == sorted(outage)
    assert set(events.values_list("kind", "actor", "reason")) == {(EventKind.MANUAL_RETRY, "alice", REASON)}
    # Bob's forged POST left nothing; the other failure was never matched.
    assert BulkOperation.objects.count() == 1
    assert Job.objects.get(last_error_code="AUTH_FAILED").status == JobStatus.FAILED


def retry_all_matching(browser: Browser, base_url: str) -> None:
    console = Console(browser, base_url)
    page = console.page
    console.log_in("alice")
    page.goto(LIST)
    console.filter_by("failed now, with error code", CODE)
    expect(page).to_have_url(re.compile(rf"\?failed_code={CODE}$"))
    expect(page.locator("#result_list tbody tr")).to_have_count(FAILED)

    page.get_by_role("link", name="Retry all matching…").click()
    expect(page.locator("h1")).to_contain_text(f"Retry every job matching status=failed, code={CODE}")
    expect(page.locator("#bulk-count")).to_contain_text(f"{FAILED} jobs match")
    expect(page.locator("#bulk-sample tbody tr")).to_have_count(20)
    submit = page.get_by_role("button", name=f"Retry all {FAILED} matching")
    submit.click()  # without a reason: the browser refuses to send the form
    expect(page.locator("#id_reason:invalid")).to_have_count(1)
    page.fill("#id_reason", REASON)
    page.fill("#id_pace", "20")
    console.shoot("bulk-confirm")
    submit.click()

    expect(page).to_have_url(re.compile(r"/admin/django_jobs/job/operation/\d+/$"))
    expect(page.locator(".messagelist")).to_contain_text("started")
    # The page refreshes itself while the operation runs: two seconds at twenty jobs a second.
    expect(page.locator("#operation-state")).to_contain_text("Done", timeout=30_000)
    expect(page.locator("#operation-counts")).to_have_text(f"{FAILED} done, 0 skipped, 0 left")
    console.shoot("bulk-operation")
    operation_url = page.url
    page.get_by_role("link", name=re.compile(r"^job #\d+$")).click()  # the job that carried it out
    expect(page.locator(".field-status .readonly")).to_have_text("Completed")
    page.goto(operation_url)
    console.log_out()

    # Bob may look, not act: no link, and his forged POST is refused.
    console.log_in("bob")
    page.goto(f"{LIST}?error_code={CODE}")  # the retried jobs keep their last error
    expect(page.locator("#result_list tbody tr")).to_have_count(FAILED)
    expect(page.get_by_role("link", name="Retry all matching…")).to_have_count(0)
    expect(page.get_by_role("link", name="Cancel all matching…")).to_have_count(0)
    token = next(c["value"] for c in console.context.cookies() if c["name"] == "csrftoken")
    forged = page.request.post(
        f"/admin/django_jobs/job/bulk/retry/?failed_code={CODE}",
        form={"reason": "mine", "pace": "10000", "csrfmiddlewaretoken": token},
        headers={"Referer": base_url + LIST, "X-CSRFToken": token},
    )
    assert forged.status == 403
    assert "You may see jobs but not retry jobs." in forged.text()
