"""A job's page in the console: its fields (the payload and checkpoint masked for whoever may
not see sensitive fields), its history a page of events at a time, what its external calls did,
why it is not running (``diagnosis``), and the actions its state allows this user."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.http import urlencode

from django_jobs import masking
from django_jobs.conf import jobs_settings
from django_jobs.console.display import durable_steps, duration, external_calls, json_block, read_now, visible
from django_jobs.console.durable_pages import PERMISSION as SIGNAL_PERMISSION
from django_jobs.console.durable_pages import TAKES_SIGNALS, DurablePages
from django_jobs.console.job_actions import JobActionPages
from django_jobs.console.pages import plain_refusal, read_page
from django_jobs.errors import public_class_path
from django_jobs.models import Job, JobEvent
from django_jobs.observe.traceparent import trace_id_of
from django_jobs.reads import durable as durable_reads
from django_jobs.states import JobStatus

#: The job page shows this many events at a time, newest first, with a link to older ones.
EVENTS_PER_PAGE = 50

_EVENT_ID = re.compile(r"^[0-9]{1,18}$")


def _asleep(parked: durable_reads.Suspension | None) -> bool:
    return parked is not None and parked.kind == "sleep"


class JobPage(JobActionPages, DurablePages):
    """A job's page (the admin's change view, read-only) and its fields."""

    def has_view_sensitive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(masking.PERMISSION)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Job | None:
        job = super().get_object(request, object_id, from_field)
        if job is not None:
            # Read by the field displays below, which see the job but not the request.
            job.shows_sensitive = self.has_view_sensitive_permission(request)  # type: ignore[attr-defined]
        return job

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> str:
        return json_block(visible(job, job.payload))

    @admin.display(description="checkpoint")
    def checkpoint_pretty(self, job: Job) -> str:
        if job.checkpoint is None:
            return "—"
        return json_block(visible(job, job.checkpoint))

    @admin.display(description="return value")
    def return_value_pretty(self, job: Job) -> str:
        if job.status != JobStatus.COMPLETED:
            return "—"
        return json_block(visible(job, job.return_value))

    @admin.display(description="last error (sanitized)")
    def last_error_pretty(self, job: Job) -> str:
        return format_html("<pre class='djj-error'>{}</pre>", job.last_error) if job.last_error else "—"

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        progress = job.progress or {}
        done, total = progress.get("done"), progress.get("total")
        if not isinstance(done, int | float):
            return "—"
        if isinstance(total, int | float) and total > 0:
            return format_html(
                '<progress value="{}" max="{}"></progress> {} / {} ({}%)', done, total, done, total,
                round(100 * done / total),
            )  # fmt: skip
        return str(done)

    @admin.display(description="trace")
    def trace_id(self, job: Job) -> str:
        """The trace id of the enqueue (or of an operator's retry), to look the job up in the
        tracing tool; "—" for a job enqueued without tracing."""
        return trace_id_of(job.trace_context) or "—"

    @admin.display(description="heartbeat")
    def heartbeat_age(self, job: Job) -> str:
        if job.heartbeat_at is None or job.status != JobStatus.RUNNING:
            return "—"  # a finished job's last beat would only suggest it still runs
        age = duration(read_now(job) - job.heartbeat_at)
        return f"{age} ago ({job.heartbeat_at:%Y-%m-%d %H:%M:%S})"

    @read_page
    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        before = request.GET.get("events_before")
        if before is not None and not _EVENT_ID.match(before):
            return plain_refusal("events_before must be an event id")
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            # Imported when a job's page is first served (see console/__init__.py).
            from django_jobs.observe import diagnosis

            context.update(self._history(request, job, int(before) if before else None))
            context["external_calls"] = external_calls(job)
            context["durable_steps"] = durable_steps(job)
            context["diagnosis"] = diagnosis.explain(job)
            parked = durable_reads.suspension(job.id) if job.status == JobStatus.PENDING else None
            context["job_actions"] = [
                (action, self.action_url(action.name, [job.id]))
                for action in self.allowed_actions(request)
                if job.status in action.eligible and (action.name != "wake" or _asleep(parked))
            ]
            if job.status in TAKES_SIGNALS and request.user.has_perm(SIGNAL_PERMISSION):
                context["signal_url"] = self.signal_url(job.id)
        return super().change_view(request, object_id, form_url, context)

    def _history(self, request: HttpRequest, job: Job, before: int | None) -> dict[str, Any]:
        """One page of the job's events, newest first: a job retried by hand ten thousand
        times, or a chatty type, has that many."""
        events = JobEvent.objects.using(jobs_settings.DATABASE).filter(job_id=job.id).order_by("-id")
        if before is not None:
            events = events.filter(id__lt=before)
        page = list(events[: EVENTS_PER_PAGE + 1])
        older = page[EVENTS_PER_PAGE - 1].id if len(page) > EVENTS_PER_PAGE else None
        page = page[:EVENTS_PER_PAGE]
        for event in page:  # an exception class of ours stored under a module since moved
            if isinstance(event.details, dict) and isinstance(event.details.get("exception"), str):
                event.details["exception"] = public_class_path(event.details["exception"])
        if not self.has_view_sensitive_permission(request):
            masker = masking.masker_for(job.type)
            for event in page:
                event.details = masker.mask(event.details)
        return {
            "events": page,
            "events_newest": before is None,  # the page that starts with the job's present
            "events_oldest": older is None,  # the page that ends with its enqueueing
            "events_older_url": f"?{urlencode({'events_before': older})}#job-history" if older else None,
        }
