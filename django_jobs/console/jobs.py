"""The operator's console in the Django admin: the job admin and its list; a job's page is
``console.job_page``.

Read-only by design: nobody edits a payload or a status through a form. Every action (retry,
cancel, resolve; ``console.job_actions``) goes through a confirmation page, is POST with CSRF,
needs its own permission, runs the same guarded transition as the workers, and leaves a
``JobEvent`` with who and why plus a Django ``LogEntry``. Sending a signal to a durable job
(``console.durable_pages``), pausing a queue (``console.queues``), a restore hold's actions
(``console.restore_pages``), cancelling a workflow (``console.workflow_pages``, with its
drawing) and acting on every job a filter matches (``console.bulk_pages``) follow the same
pattern.

Built for tables of millions of rows (:mod:`~django_jobs.console.listing`): no full
``COUNT(*)``, filter choices from loose index scans, every filter and the search served by an
index, and the list reads nothing but the job rows.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from django_jobs.conf import jobs_settings
from django_jobs.console import durable_actions
from django_jobs.console.bulk_pages import BulkPages
from django_jobs.console.display import duration, read_now
from django_jobs.console.job_actions import ACTIONS, bulk
from django_jobs.console.job_page import JobPage
from django_jobs.console.listing import (
    AttentionFilter,
    EndedFilter,
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
from django_jobs.console.pages import read_page
from django_jobs.console.queues import QueuePages
from django_jobs.console.restore_pages import RestorePages
from django_jobs.console.workflow_pages import WorkflowPages
from django_jobs.models import Job
from django_jobs.reads.search import SearchRefused, search_condition
from django_jobs.states import JobStatus


class JobAdmin(JobPage, QueuePages, RestorePages, WorkflowPages, BulkPages):
    """The job admin: the list, and (from its parts) a job's page, the actions' confirmation,
    the dashboard, the queue actions and the actions on every job a filter matches."""

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
        EndedFilter,
        RestoreFilter,
        WorkflowFilter,
    )
    # Sorting by another column would sort the whole (filtered) table for every page.
    sortable_by = ("id",)
    search_fields = ("type",)  # see get_search_results: exact matches only, each one indexed
    search_help_text = "A job id, or an exact type, unique key, error code or searchable payload field=value."
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    ordering = ("-id",)
    actions = [bulk(name) for name in ACTIONS]
    change_list_template = "admin/django_jobs/job/change_list.html"
    change_form_template = "admin/django_jobs/job/change_form.html"
    fieldsets = (
        (None, {"fields": ("id", "type", "queue", "status", "priority", "version", "unique_key",
                           "debounce_key")}),
        ("Attempts", {"fields": ("attempts", "max_attempts", "manual_retries", "retried_by", "retried_at")}),
        (
            "Execution",
            {
                "fields": (
                    "worker_id", "execution_id", "trace_id", "started_at", "heartbeat_age",
                    "lease_expires_at", "cancel_requested_at", "progress_bar", "checkpoint_pretty",
                )
            },
        ),
        ("Outcome", {"fields": ("last_error_code", "last_error_pretty", "return_value_pretty", "available_at",
                                "start_by", "created_at", "completed_at", "failed_at", "finished_at")}),
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

    def has_wake_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"django_jobs.{durable_actions.PERMISSION}")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for _, options in self.fieldsets for f in options["fields"]]

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Only the list filters read the query string. Django would otherwise accept any lookup
        # on a local field from the URL: ?payload__card__startswith=4 would scan the table and
        # let a viewer probe the very values the console masks.
        return lookup in {list_filter.parameter_name for list_filter in self.list_filter}

    # ---- the list ---------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # Ages and "stale" are measured by the database's clock, as the reaper and the stale
        # filter do: a web server whose clock drifts must not label a healthy job stale. Read
        # where the page reads (CONSOLE_DATABASE, see pages.read_page), with or without a router.
        return (
            super()
            .get_queryset(request)
            .using(jobs_settings.DATABASE)
            .annotate(
                db_now=Now(),
                lease_expired=ExpressionWrapper(
                    Q(status=JobStatus.RUNNING, lease_expires_at__lt=Now()), output_field=BooleanField()
                ),
            )
        )

    @read_page
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, extra_context)

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

    # ---- the pages of its parts ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("dashboard/", view(self.dashboard_view), name="django_jobs_job_dashboard"),
            path("act/<str:action_name>/", view(self.action_view), name="django_jobs_job_action"),
            path("signal/<int:job_id>/", view(self.signal_view), name="django_jobs_job_signal"),
            path("queue/<str:verb>/", view(self.queue_action_view), name="django_jobs_queue"),
            path("restore/<str:verb>/", view(self.restore_action_view), name="django_jobs_restore"),
            path("workflow/<int:workflow_id>/", view(self.workflow_view), name="django_jobs_workflow"),
            path("bulk/<str:action>/", view(self.bulk_view), name="django_jobs_bulk"),
            path("operation/<int:operation_id>/", view(self.operation_view), name="django_jobs_operation"),
            path("operations/", view(self.operations_view), name="django_jobs_operations"),
            *super().get_urls(),
        ]
