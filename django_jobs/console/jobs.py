"""The operator's console in the Django admin: the job admin, its list and a job's page.

Read-only by design: nobody edits a payload or a status through a form. Every action (retry,
cancel, resolve; ``console.job_actions``) goes through a confirmation page, is POST with CSRF,
needs its own permission, runs the same guarded transition as the workers, and leaves a
``JobEvent`` with who and why plus a Django ``LogEntry``. Pausing a queue (``console.queues``),
a restore hold's actions (``console.restore_pages``) and cancelling a workflow
(``console.workflow_pages``, with its drawing) follow the same pattern.

Built for tables of millions of rows (:mod:`~django_jobs.console.listing`): no full
``COUNT(*)``, filter choices from loose index scans, every filter and the search served by an
index, and the list reads nothing but the job rows.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.http import urlencode

from django_jobs import masking
from django_jobs.console.display import duration, external_calls, json_block, read_now, visible
from django_jobs.console.job_actions import ACTIONS, JobActionPages, bulk
from django_jobs.console.listing import (
    AttentionFilter,
    ErrorCodeFilter,
    EstimatedCountPaginator,
    FailedWithCodeFilter,
    JobChangeList,
    QueueFilter,
    RestoreFilter,
    StatusFilter,
    TypeFilter,
    WorkflowFilter,
    text_parameter,
)
from django_jobs.console.pages import plain_refusal
from django_jobs.console.queues import QueuePages
from django_jobs.console.restore_pages import RestorePages
from django_jobs.console.workflow_pages import WorkflowPages
from django_jobs.models import Job, JobEvent
from django_jobs.observe import diagnosis
from django_jobs.reads.search import SearchRefused, search_condition
from django_jobs.states import JobStatus

#: The job page shows this many events at a time, newest first, with a link to older ones.
EVENTS_PER_PAGE = 50

_EVENT_ID = re.compile(r"^[0-9]{1,18}$")


class JobAdmin(JobActionPages, QueuePages, RestorePages, WorkflowPages):
    """The job admin: the list, a job's page, and (from its parts) the actions' confirmation,
    the dashboard and the queue actions."""

    list_display = (
        "id", "type", "queue", "status_label", "attempts_label", "last_error_code", "timing", "worker_id",
    )  # fmt: skip
    list_display_links = ("id", "type")
    list_filter = (
        StatusFilter,
        AttentionFilter,
        QueueFilter,
        TypeFilter,
        FailedWithCodeFilter,
        ErrorCodeFilter,
        RestoreFilter,
        WorkflowFilter,
    )
    # Sorting by another column would sort the whole (filtered) table for every page.
    sortable_by = ("id",)
    search_fields = ("type",)  # see get_search_results: exact matches only, each one indexed
    search_help_text = "A job id, or an exact type, unique key or error code."
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    ordering = ("-id",)
    actions = [bulk(name) for name in ACTIONS]
    change_list_template = "admin/django_jobs/job/change_list.html"
    change_form_template = "admin/django_jobs/job/change_form.html"
    fieldsets = (
        (None, {"fields": ("id", "type", "queue", "status", "priority", "version", "unique_key")}),
        ("Attempts", {"fields": ("attempts", "max_attempts", "manual_retries", "retried_by", "retried_at")}),
        (
            "Execution",
            {
                "fields": (
                    "worker_id", "execution_id", "started_at", "heartbeat_age", "lease_expires_at",
                    "cancel_requested_at", "progress_bar", "checkpoint_pretty",
                )
            },
        ),
        ("Outcome", {"fields": ("last_error_code", "last_error_pretty", "return_value_pretty", "available_at",
                                "created_at", "completed_at", "failed_at", "finished_at")}),
        ("Payload", {"fields": ("payload_pretty",)}),
    )  # fmt: skip

    # Permissions: the console is read-only; actions have their own permissions.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.cancel_job")

    def has_resolve_completed_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.resolve_job")

    has_resolve_failed_permission = has_resolve_completed_permission

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for _, options in self.fieldsets for f in options["fields"]]

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Only the list filters read the query string. Django would otherwise accept any lookup
        # on a local field from the URL: ?payload__card__startswith=4 would scan the table and
        # let a viewer probe the very values the console masks.
        return lookup in {list_filter.parameter_name for list_filter in self.list_filter}

    def has_view_sensitive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(masking.PERMISSION)

    # ---- the list ---------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # Ages and "stale" are measured by the database's clock, as the reaper and the stale
        # filter do: a web server whose clock drifts must not label a healthy job stale.
        return (
            super()
            .get_queryset(request)
            .annotate(
                db_now=Now(),
                lease_expired=ExpressionWrapper(
                    Q(status=JobStatus.RUNNING, lease_expires_at__lt=Now()), output_field=BooleanField()
                ),
            )
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = (text_parameter("search", search_term) or "").strip()
        if not term:
            return queryset, False
        try:
            match = search_condition(term)
        except SearchRefused as exc:
            raise BadRequest(str(exc)) from None
        return queryset.filter(match), False

    @admin.display(description="status", ordering="status")
    def status_label(self, job: Job) -> str:
        stale = getattr(job, "lease_expired", False)
        return format_html(
            '<span class="djj-status djj-{}">{}</span>', job.status, "stale" if stale else job.status
        )

    @admin.display(description="attempts")
    def attempts_label(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="age / available in")
    def timing(self, job: Job) -> str:
        now = read_now(job)
        if job.status == JobStatus.PENDING:
            if job.available_at > now:
                return f"in {duration(job.available_at - now)}"
            return f"waiting {duration(now - job.available_at)}"
        if job.status == JobStatus.RUNNING and job.started_at:
            return f"running {duration(now - job.started_at)}"
        if job.finished_at:
            return f"{duration(now - job.finished_at)} ago"
        return f"created {duration(now - job.created_at)} ago"

    # ---- the detail -------------------------------------------------------------------------

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

    @admin.display(description="heartbeat")
    def heartbeat_age(self, job: Job) -> str:
        if job.heartbeat_at is None or job.status != JobStatus.RUNNING:
            return "—"  # a finished job's last beat would only suggest it still runs
        age = duration(read_now(job) - job.heartbeat_at)
        return f"{age} ago ({job.heartbeat_at:%Y-%m-%d %H:%M:%S})"

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
            context.update(self._history(request, job, int(before) if before else None))
            context["external_calls"] = external_calls(job)
            context["diagnosis"] = diagnosis.explain(job)
            context["job_actions"] = [
                (action, self.action_url(action.name, [job.id]))
                for action in self.allowed_actions(request)
                if job.status in action.eligible
            ]
        return super().change_view(request, object_id, form_url, context)

    def _history(self, request: HttpRequest, job: Job, before: int | None) -> dict[str, Any]:
        """One page of the job's events, newest first: a job retried by hand ten thousand
        times, or a chatty type, has that many."""
        events = JobEvent.objects.filter(job_id=job.id).order_by("-id")
        if before is not None:
            events = events.filter(id__lt=before)
        page = list(events[: EVENTS_PER_PAGE + 1])
        older = page[EVENTS_PER_PAGE - 1].id if len(page) > EVENTS_PER_PAGE else None
        page = page[:EVENTS_PER_PAGE]
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

    # ---- the pages of its parts ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("dashboard/", view(self.dashboard_view), name="django_jobs_job_dashboard"),
            path("act/<str:action_name>/", view(self.action_view), name="django_jobs_job_action"),
            path("queue/<str:verb>/", view(self.queue_action_view), name="django_jobs_queue"),
            path("restore/<str:verb>/", view(self.restore_action_view), name="django_jobs_restore"),
            path("workflow/<int:workflow_id>/", view(self.workflow_view), name="django_jobs_workflow"),
            *super().get_urls(),
        ]
