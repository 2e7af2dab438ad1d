"""The operator's console in the Django admin.

Read-only by design: nobody edits a payload or a status through a form. Every action (retry,
cancel, resolve) goes through a confirmation page, is POST with CSRF, needs its own permission
(``retry_job``, ``cancel_job``, ``resolve_job``), runs the same guarded transition as the workers,
and leaves a ``JobEvent`` with who and why plus a Django ``LogEntry``.

Built for tables of millions of rows: no full ``COUNT(*)`` (the paginator uses the planner's
estimate on large results), filter choices come from loose index scans, every filter and the
search are served by an index, and the list reads nothing but the job rows.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from django_jobs import dashboard, transitions
from django_jobs.conf import jobs_settings
from django_jobs.models import Job, JobEvent
from django_jobs.states import JobStatus

if TYPE_CHECKING:  # the admin classes are generic only for the type checker
    ModelAdmin = admin.ModelAdmin[Job]
else:
    ModelAdmin = admin.ModelAdmin

#: Above this many rows (by the planner's estimate) the list shows an estimate, not a count.
EXACT_COUNT_LIMIT = 10_000
MAX_IDS_PER_ACTION = 1000


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]  # generic only in the stubs
    """Counts exactly only small results; large ones use the planner's row estimate."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        sql, params = queryset.query.sql_with_params()
        with connections[queryset.db].cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            estimate = int(_first(cursor.fetchone())[0]["Plan"]["Plan Rows"])
        if estimate > EXACT_COUNT_LIMIT:
            return estimate
        return queryset.count()


def _first(row: Any) -> Any:
    plan = row[0]
    return json.loads(plan) if isinstance(plan, str) else plan


# ---- filters: choices without reading the table ---------------------------------------------------


class _IndexedValuesFilter(admin.SimpleListFilter):
    column = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in Job.objects.distinct_values(self.column)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class QueueFilter(_IndexedValuesFilter):
    title = "queue"
    parameter_name = "queue"
    column = "queue"


class TypeFilter(_IndexedValuesFilter):
    title = "type"
    parameter_name = "type"
    column = "type"


class ErrorCodeFilter(_IndexedValuesFilter):
    title = "error code"
    parameter_name = "error_code"
    column = "last_error_code"


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(status=self.value()) if self.value() else queryset


class AttentionFilter(admin.SimpleListFilter):
    """The two questions of an incident: what is stuck, and what waits for a human."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("stale", "Stale running (lease expired)"), ("review", "Needs review")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "stale":
            return queryset.filter(pk__in=Job.objects.stale().values("pk"))
        if self.value() == "review":
            return queryset.filter(status=JobStatus.NEEDS_REVIEW)
        return queryset


# ---- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    permission: str  # codename in the django_jobs app
    eligible: frozenset[str]
    effect: str  # what happens, shown on the confirmation page
    run: Callable[[int, str, str], str]  # (job id, actor, reason) → what happened


def _retry(job_id: int, actor: str, reason: str) -> str:
    was = transitions.manual_retry(job_id, actor=actor, reason=reason)
    return f"retried (was {was})"


def _cancel(job_id: int, actor: str, reason: str) -> str:
    result = transitions.cancel(job_id, actor=actor, reason=reason)
    if result == transitions.CancelResult.NOT_CANCELLABLE:
        raise transitions.ActionRefused(f"job {job_id} is not cancellable any more")
    return "cancelled" if result == transitions.CancelResult.CANCELLED else "cancellation requested"


def _resolver(to: str) -> Callable[[int, str, str], str]:
    def resolve(job_id: int, actor: str, reason: str) -> str:
        transitions.resolve(job_id, to=to, actor=actor, reason=reason)
        return f"resolved as {to}"

    return resolve


ACTIONS = {
    action.name: action
    for action in (
        Action(
            "retry", "Retry", "retry_job", frozenset(transitions.RETRYABLE_BY_OPERATOR),
            "becomes pending again, with a fresh attempt budget; its history is kept", _retry,
        ),
        Action(
            "cancel", "Cancel", "cancel_job", frozenset({JobStatus.PENDING, JobStatus.RUNNING}),
            "a pending job is cancelled at once; a running one is asked to stop and ends cancelled",
            _cancel,
        ),
        Action(
            "resolve_completed", "Resolve as done", "resolve_job", frozenset({JobStatus.NEEDS_REVIEW}),
            "is marked completed: someone checked that its effect happened", _resolver(JobStatus.COMPLETED),
        ),
        Action(
            "resolve_failed", "Resolve as failed", "resolve_job", frozenset({JobStatus.NEEDS_REVIEW}),
            "is marked failed: someone checked that its effect did not happen and must not",
            _resolver(JobStatus.FAILED),
        ),
    )
}  # fmt: skip


def _bulk(action_name: str) -> Callable[[JobAdmin, HttpRequest, QuerySet[Job]], HttpResponse]:
    action = ACTIONS[action_name]

    def bulk_action(model_admin: JobAdmin, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse:
        ids = list(queryset.values_list("id", flat=True)[: MAX_IDS_PER_ACTION + 1])
        return HttpResponseRedirect(model_admin.action_url(action.name, ids))

    bulk_action.__name__ = f"{action_name}_selected"
    return admin.action(description=f"{action.label} selected jobs…", permissions=[action.name])(bulk_action)


# ---- the job admin ------------------------------------------------------------------------------


@admin.register(Job)
class JobAdmin(ModelAdmin):
    list_display = (
        "id",
        "type",
        "queue",
        "status_label",
        "attempts_label",
        "last_error_code",
        "timing",
        "worker_id",
    )
    list_display_links = ("id", "type")
    list_filter = (StatusFilter, AttentionFilter, QueueFilter, TypeFilter, ErrorCodeFilter)
    search_fields = ("type",)  # see get_search_results: exact matches only, each one indexed
    search_help_text = "A job id, or an exact type, unique key or error code."
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    ordering = ("-id",)
    actions = [_bulk(name) for name in ACTIONS]
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
        ("Outcome", {"fields": ("last_error_code", "last_error_pretty", "available_at", "created_at",
                                "completed_at", "failed_at", "finished_at")}),
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

    # ---- the list ---------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # "Stale" is decided by the database's clock, as the reaper and the stale filter do.
        return (
            super()
            .get_queryset(request)
            .annotate(
                lease_expired=ExpressionWrapper(
                    Q(status=JobStatus.RUNNING, lease_expires_at__lt=Now()), output_field=BooleanField()
                )
            )
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(type=term) | Q(unique_key=term) | Q(last_error_code=term)
        # ASCII digits only: str.isdigit() is true for "²", which int() refuses.
        if _JOB_ID.match(term):
            match |= Q(id=int(term.lstrip("#")))
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
        now = timezone.now()
        if job.status == JobStatus.PENDING:
            if job.available_at > now:
                return f"in {_duration(job.available_at - now)}"
            return f"waiting {_duration(now - job.available_at)}"
        if job.status == JobStatus.RUNNING and job.started_at:
            return f"running {_duration(now - job.started_at)}"
        if job.finished_at:
            return f"{_duration(now - job.finished_at)} ago"
        return f"created {_duration(now - job.created_at)} ago"

    # ---- the detail -------------------------------------------------------------------------

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> str:
        return format_html(
            "<pre class='djj-json'>{}</pre>", json.dumps(job.payload, indent=2, ensure_ascii=False)
        )

    @admin.display(description="checkpoint")
    def checkpoint_pretty(self, job: Job) -> str:
        if job.checkpoint is None:
            return "—"
        return format_html("<pre class='djj-json'>{}</pre>", json.dumps(job.checkpoint, indent=2))

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
        return f"{_duration(timezone.now() - job.heartbeat_at)} ago ({job.heartbeat_at:%Y-%m-%d %H:%M:%S})"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            context["events"] = list(JobEvent.objects.filter(job_id=job.id).order_by("id"))
            context["job_actions"] = [
                (action, self.action_url(action.name, [job.id]))
                for action in self.allowed_actions(request)
                if job.status in action.eligible
            ]
        return super().change_view(request, object_id, form_url, context)

    # ---- actions: one confirmation view for single and bulk ---------------------------------

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path("dashboard/", site.admin_view(self.dashboard_view), name="django_jobs_job_dashboard"),
            path("act/<str:action_name>/", site.admin_view(self.action_view), name="django_jobs_job_action"),
            *super().get_urls(),
        ]

    def action_url(self, action_name: str, ids: list[int]) -> str:
        url = reverse(f"{self.admin_site.name}:django_jobs_job_action", args=[action_name])
        return f"{url}?{urlencode({'ids': ','.join(map(str, ids))})}"

    def allowed_actions(self, request: HttpRequest) -> list[Action]:
        return [a for a in ACTIONS.values() if request.user.has_perm(f"django_jobs.{a.permission}")]

    @method_decorator(require_http_methods(["GET", "POST"]))
    def action_view(self, request: HttpRequest, action_name: str) -> HttpResponse:
        action = ACTIONS.get(action_name)
        if not self.has_view_permission(request):
            raise PermissionDenied
        if action is None:
            return HttpResponseBadRequest(f"unknown action {action_name!r}")
        if not request.user.has_perm(f"django_jobs.{action.permission}"):
            raise PermissionDenied
        raw = (request.POST if request.method == "POST" else request.GET).get("ids", "")
        parts = [part.strip() for part in raw.split(",") if part.strip()]
        if not all(_JOB_ID.match(part) and not part.startswith("#") for part in parts):
            return HttpResponseBadRequest("ids must be job ids separated by commas")
        ids = sorted({int(part) for part in parts})
        if not ids or len(ids) > MAX_IDS_PER_ACTION:
            return HttpResponseBadRequest(f"give between 1 and {MAX_IDS_PER_ACTION} job ids")
        jobs = list(Job.objects.filter(id__in=ids).order_by("-id"))
        if not jobs:
            raise Http404("none of these jobs exists")
        eligible = [job for job in jobs if job.status in action.eligible]
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = None
        if request.method == "POST":
            if not reason:
                error = "Say why: the reason is kept in the job's history."
            else:
                self._perform(request, action, eligible, reason)
                if len(ids) == 1:
                    return HttpResponseRedirect(
                        reverse(f"{self.admin_site.name}:django_jobs_job_change", args=[ids[0]])
                    )
                return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_jobs_job_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{action.label}: confirm",
            "action": action,
            "jobs": jobs,
            "eligible_ids": {job.id for job in eligible},
            "missing": len(ids) - len(jobs),
            "ids": ",".join(map(str, ids)),
            "reason": reason,
            "error": error,
        }
        return TemplateResponse(
            request, "admin/django_jobs/job/confirm_action.html", context, status=400 if error else 200
        )

    def _perform(self, request: HttpRequest, action: Action, jobs: list[Job], reason: str) -> None:
        actor = request.user.get_username()
        done, refused = 0, []
        for job in jobs:
            try:
                outcome = action.run(job.id, actor, reason)
            except transitions.ActionRefused as exc:
                refused.append(str(exc))
                continue
            done += 1
            self.log_change(request, job, f"{outcome}: {reason}")
        if done:
            messages.success(request, f"{action.label}: {done} job(s) done.")
        for message in refused:
            messages.warning(request, message)
        if not jobs:
            messages.warning(request, f"{action.label}: none of the selected jobs was eligible.")

    # ---- dashboard --------------------------------------------------------------------------

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Jobs dashboard",
            "board": dashboard.build(),
            "heartbeat_interval": jobs_settings.HEARTBEAT_INTERVAL,
        }
        return TemplateResponse(request, "admin/django_jobs/job/dashboard.html", context)


#: A job id as typed by a person: ASCII digits that fit a bigint, optionally after "#".
_JOB_ID = re.compile(r"^#?[0-9]{1,18}$")


def _duration(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
