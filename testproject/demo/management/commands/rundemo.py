"""Enqueue a realistic mix of demo jobs, run workers until every one has settled, summarise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.db.models import Count, Min

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job, JobEvent
from django_jobs.states import ACTIVE_STATUSES, JobStatus
from testproject.demo.models import Invoice
from testproject.demo.provider import FakeProvider

DEMO_TYPES = [
    "demo.send_welcome_email",
    "demo.sync_crm_contact",
    "demo.charge_invoice",
    "demo.generate_report",
    "demo.import_legacy_file",
]


class Command(BaseCommand):
    help = "Run the demo: enqueue a mix of jobs, run two workers until all settle, print a summary."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--timeout", type=float, default=120.0, help="Give up after this many seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        provider = FakeProvider().start()
        os.environ["DEMO_PROVIDER_URL"] = provider.url  # the worker processes inherit it
        try:
            since = self.enqueue_demo_jobs()
            self.run_workers_until_settled(since, options["timeout"])
        finally:
            provider.stop()
        self.print_summary(since)
        invoices = Invoice.objects.filter(number__startswith=f"{self.run}-")
        paid = invoices.filter(status=Invoice.Status.PAID).count()
        self.stdout.write(f"\nInvoices paid: {paid} of {invoices.count()}, each by exactly one charge.")
        self.print_admin_hint()

    def enqueue_demo_jobs(self) -> int:
        last = Job.objects.order_by("-id").values_list("id", flat=True).first() or 0
        run = self.run = int(time.time() * 1000)
        # As a view would: the jobs commit together with the business change, or not at all.
        with transaction.atomic():
            enqueue_many("demo.send_welcome_email", [{"user_id": run * 100 + i} for i in range(40)])
            enqueue_many("demo.sync_crm_contact", [{"contact_id": f"{run}-{i}"} for i in range(6)])
            invoices = [Invoice.objects.create(number=f"{run}-{i}", amount_cents=1999) for i in range(4)]
            enqueue_many("demo.charge_invoice", [{"invoice": invoice.number} for invoice in invoices])
            enqueue_many("demo.generate_report", [{"report_id": i + 1} for i in range(5)])
            enqueue("demo.generate_report", {"report_id": "last-week"})  # invalid: fails permanently
            enqueue("demo.generate_report", {})  # invalid too
            enqueue("demo.import_legacy_file", {"rows": [{"amount": 10, "quantity": 0}]})  # poison
        count = Job.objects.filter(id__gt=last).count()
        self.stdout.write(
            f"Enqueued {count} demo jobs (ids > {last}) on queues emails, integrations, reports."
        )
        return last

    def run_workers_until_settled(self, since: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        demo = Job.objects.filter(id__gt=since)
        rounds = 0
        while demo.filter(status__in=ACTIVE_STATUSES).exists():
            if time.monotonic() > deadline:
                self.stderr.write("The demo did not settle in time; see the summary below.")
                return
            # Retries wait for their backoff: sleep until the first one is due, then drain again.
            next_at = demo.filter(status=JobStatus.PENDING).aggregate(at=Min("available_at"))["at"]
            if next_at is not None:
                wait = (next_at - _db_now()).total_seconds()
                if wait > 0:
                    time.sleep(min(wait, 2.0))
            rounds += 1
            workers = [
                subprocess.Popen(
                    [sys.executable, "manage.py", "runjobs", "--burst", "--concurrency", "4", "-v", "0"],
                    cwd=settings.BASE_DIR.parent,
                )
                for _ in range(2)
            ]
            for worker in workers:
                worker.wait()
        self.stdout.write(f"All demo jobs settled after {rounds} rounds of two `runjobs --burst` workers.\n")

    def print_summary(self, since: int) -> None:
        rows = (
            Job.objects.filter(id__gt=since)
            .values("type", "status")
            .annotate(n=Count("id"))
            .order_by("type", "status")
        )
        statuses = [s for s in JobStatus.values]
        table: dict[str, dict[str, int]] = {t: dict.fromkeys(statuses, 0) for t in DEMO_TYPES}
        for row in rows:
            table.setdefault(row["type"], dict.fromkeys(statuses, 0))[row["status"]] = row["n"]
        shown = [s for s in statuses if any(table[t][s] for t in table)]
        width = max(len(t) for t in table) + 2
        header = "type".ljust(width) + "".join(s.rjust(12) for s in shown) + "   events"
        self.stdout.write(header)
        self.stdout.write("-" * len(header))
        events = dict(
            JobEvent.objects.filter(job_id__gt=since)
            .values_list("job__type")
            .annotate(n=Count("id"))
            .order_by()
        )
        for t, counts in table.items():
            self.stdout.write(
                t.ljust(width)
                + "".join(str(counts[s]).rjust(12) for s in shown)
                + str(events.get(t, 0)).rjust(9)
            )
        totals = "total".ljust(width) + "".join(str(sum(table[t][s] for t in table)).rjust(12) for s in shown)
        self.stdout.write("-" * len(header))
        self.stdout.write(totals + str(sum(events.values())).rjust(9))
        failed = Job.objects.filter(id__gt=since, status=JobStatus.FAILED).order_by("id")
        if failed:
            self.stdout.write("\nFailed jobs keep everything an operator needs:")
            for job in failed:
                first_line = (job.last_error or "").splitlines()[0] if job.last_error else ""
                self.stdout.write(
                    f"  #{job.id} {job.type} attempts={job.attempts}/{job.max_attempts} "
                    f"code={job.last_error_code}: {first_line}"
                )

    def print_admin_hint(self) -> None:
        user_model = get_user_model()
        if not user_model.objects.filter(username="admin").exists():
            user_model.objects.create_superuser("admin", "admin@example.com", "admin")
        self.stdout.write(
            "\nLook at the result in the admin: `.venv/bin/python manage.py runserver`, then open "
            "http://127.0.0.1:8000/admin/django_jobs/job/ (user admin, password admin — local demo only)."
        )


def _db_now() -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]
