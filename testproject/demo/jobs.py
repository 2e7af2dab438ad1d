"""The demo's job types: a realistic mix of what background jobs meet in production."""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Now

from django_jobs import Backoff, ErrorCode, JobContext, PermanentError, SkipJob, compare_and_set, job
from testproject.demo.client import call_provider
from testproject.demo.models import Invoice, SentEmail

# Short delays so the demo settles in seconds; production policies count in minutes.
DEMO_BACKOFF = Backoff(base=0.2, cap=2.0, jitter=0.25)


@job("demo.send_welcome_email", queue="emails", backoff=DEMO_BACKOFF, sla=300, external=True)
def send_welcome_email(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Succeeds. The effect is recorded with its key in the same transaction, so a second run
    skips it; the UNIQUE constraint on SentEmail would stop a second row anyway. It should start
    within five minutes of being due: the dashboard's SLA card counts those waiting longer."""
    with ctx.effect(f"welcome-email:user:{payload['user_id']}") as first_time:
        if first_time:
            SentEmail.objects.create(user_id=payload["user_id"], kind="welcome")


@job("demo.sync_crm_contact", queue="integrations", backoff=DEMO_BACKOFF, external=True)
def sync_crm_contact(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A flaky provider: answers 503 a few times, then succeeds."""
    call_provider(ctx, f"/operations/crm-{payload['contact_id']}?fail=2&status=503", payload)


@job("demo.charge_invoice", queue="integrations", backoff=DEMO_BACKOFF, external=True)
def charge_invoice(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A rate-limited provider: answers 429 with Retry-After: 1 once, then succeeds.

    The charge carries a stable Idempotency-Key, so a retry never charges twice; the invoice
    moves waiting_payment → paid by compare-and-set, so a re-run changes nothing.
    """
    number = payload["invoice"]
    charge = call_provider(ctx, f"/operations/charge-{number}?fail=1&status=429&retry_after=1", payload)
    moved = compare_and_set(
        Invoice.objects.filter(number=number),
        "status",
        Invoice.Status.WAITING_PAYMENT,
        Invoice.Status.PAID,
        charge_id=charge["id"],
        paid_at=Now(),
    )
    if not moved and not Invoice.objects.filter(number=number, status=Invoice.Status.PAID).exists():
        raise SkipJob(f"invoice {number} no longer exists")


@job("demo.generate_report", queue="reports", backoff=DEMO_BACKOFF, sensitive=("recipient",), external=False)
def generate_report(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Validates its payload: a bad one fails permanently, without retries."""
    report_id = payload.get("report_id")
    if not isinstance(report_id, int) or report_id <= 0:
        raise PermanentError(
            f"report_id must be a positive integer, got {report_id!r}", code=ErrorCode.PAYLOAD_INVALID
        )
    ctx.progress(1, 1)


@job("demo.import_legacy_file", queue="reports", max_attempts=3, backoff=DEMO_BACKOFF, external=False)
def import_legacy_file(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A poison job: crashes on every attempt and must end failed, not cycle forever."""
    rows = payload["rows"]
    _ = rows[0]["amount"] / rows[0]["quantity"]  # ZeroDivisionError: the file is corrupt


@job("demo.nightly_report", queue="reports", schedule="0 3 * * *", tz="Europe/Moscow", external=False)
def nightly_report(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Periodic: every `runjobs` fires it once a night at 03:00 Moscow time, however many run
    (the demo's `--burst` workers fire no schedule, so the demo still settles)."""
    with ctx.effect(f"nightly-report:{ctx.job_id}") as first_time:
        if first_time:
            SentEmail.objects.create(user_id=0, kind=f"nightly-report-{ctx.job_id}")
