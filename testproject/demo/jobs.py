"""The demo's job types: a realistic mix of what background jobs meet in production."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from django_jobs import Backoff, ErrorCode, JobContext, PermanentError, job
from testproject.demo.client import call_provider
from testproject.demo.models import SentEmail

# Short delays so the demo settles in seconds; production policies count in minutes.
DEMO_BACKOFF = Backoff(base=0.2, cap=2.0, jitter=0.25)


@job("demo.send_welcome_email", queue="emails", backoff=DEMO_BACKOFF)
def send_welcome_email(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Succeeds. The UNIQUE constraint makes a second run a no-op, not a second email."""
    try:
        with transaction.atomic():
            SentEmail.objects.create(user_id=payload["user_id"], kind="welcome")
    except IntegrityError:
        pass  # already sent by an earlier execution of this job


@job("demo.sync_crm_contact", queue="integrations", backoff=DEMO_BACKOFF)
def sync_crm_contact(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A flaky provider: answers 503 a few times, then succeeds."""
    call_provider(ctx, f"/operations/crm-{payload['contact_id']}?fail=2&status=503", payload)


@job("demo.charge_invoice", queue="integrations", backoff=DEMO_BACKOFF)
def charge_invoice(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A rate-limited provider: answers 429 with Retry-After: 1 once, then succeeds."""
    call_provider(ctx, f"/operations/charge-{payload['invoice_id']}?fail=1&status=429&retry_after=1", payload)


@job("demo.generate_report", queue="reports", backoff=DEMO_BACKOFF)
def generate_report(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Validates its payload: a bad one fails permanently, without retries."""
    report_id = payload.get("report_id")
    if not isinstance(report_id, int) or report_id <= 0:
        raise PermanentError(
            f"report_id must be a positive integer, got {report_id!r}", code=ErrorCode.PAYLOAD_INVALID
        )
    ctx.progress(1, 1)


@job("demo.import_legacy_file", queue="reports", max_attempts=3, backoff=DEMO_BACKOFF)
def import_legacy_file(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A poison job: crashes on every attempt and must end failed, not cycle forever."""
    rows = payload["rows"]
    _ = rows[0]["amount"] / rows[0]["quantity"]  # ZeroDivisionError: the file is corrupt
