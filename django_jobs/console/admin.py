"""The operator's console in the Django admin.

Read-only by design: nobody edits a payload or a status through a form. Every action (retry,
cancel, resolve) goes through a confirmation page, is POST with CSRF, needs its own permission
(``retry_job``, ``cancel_job``, ``resolve_job``), runs the same guarded transition as the workers,
and leaves a ``JobEvent`` with who and why plus a Django ``LogEntry``. Pausing and resuming a
queue (from the dashboard, permission ``pause_queue``) follows the same pattern, with a
``QueueEvent``.

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
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import BadRequest
from django.core.paginator import InvalidPage, Paginator
from django.db import connections
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from django_jobs import masking, transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import actions as operations
from django_jobs.console import audit as consolelog
from django_jobs.console import dashboard
from django_jobs.console import pausing as queues
from django_jobs.errors import JobNotFound
from django_jobs.models import ExternalCall, Job, JobEvent, Queue
from django_jobs.observe import diagnosis
from django_jobs.registry import QUEUE_RE
from django_jobs.states import JobStatus

if TYPE_CHECKING:  # the admin classes are generic only for the type checker
    ModelAdmin = admin.ModelAdmin[Job]
else:
    ModelAdmin = admin.ModelAdmin

#: Above this many rows (by the planner's estimate) the list shows an estimate, not a count.
EXACT_COUNT_LIMIT = 10_000
#: The list pages no deeper than this: an OFFSET of millions reads millions of rows. Filters
#: and the search reach any job in one page.
MAX_PAGES = 200
MAX_IDS_PER_ACTION = 1000
#: The confirmation page lists this many of the selected jobs and counts the rest.
CONFIRM_ROWS_SHOWN = 100
#: The job page shows this many events at a time, newest first, with a link to older ones.
EVENTS_PER_PAGE = 50
MAX_REASON_CHARS = operations.MAX_REASON_CHARS

#: What the list reads: never the payload, checkpoint, progress or error of 50 rows.
LIST_COLUMNS = (
    "id", "type", "queue", "status", "attempts", "max_attempts", "last_error_code", "worker_id",
    "available_at", "started_at", "finished_at", "created_at", "lease_expires_at",
)  # fmt: skip
#: What the confirmation page reads of each selected job.
CONFIRM_COLUMNS = ("id", "type", "queue", "status", "attempts", "max_attempts", "last_error_code")


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]  # generic only in the stubs
    """Counts exactly only small results; large ones use the planner's row estimate.

    Pages beyond ``MAX_PAGES`` do not exist: reaching them would read every row before them.
    """

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, MAX_PAGES)

    def validate_number(self, number: Any) -> int:
        page = int(super().validate_number(number))
        if page > MAX_PAGES:
            raise InvalidPage(f"the list pages no deeper than {MAX_PAGES}: narrow it with a filter")
        return page

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


def _text_parameter(name: str, value: str | None) -> str | None:
    """A filter value or search term as PostgreSQL can compare it; NUL is a 400, not a 500."""
    if value is not None and "\x00" in value:
        raise BadRequest(f"the {name} parameter holds a NUL character")
    return value


class _TextFilter(admin.SimpleListFilter):
    def value(self) -> str | None:
        return _text_parameter(str(self.parameter_name), super().value())


class _IndexedValuesFilter(_TextFilter):
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
    """Jobs whose last error had this code, whatever became of them since (a job that failed
    once and then completed keeps its last error)."""

    title = "last error code (any status)"
    parameter_name = "error_code"
    column = "last_error_code"


class FailedWithCodeFilter(_IndexedValuesFilter):
    """Only the jobs that are failed now, with this error code: what an incident is about."""

    title = "failed now, with error code"
    parameter_name = "failed_code"
    column = "last_error_code"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(status=JobStatus.FAILED, last_error_code=value) if value else queryset


class StatusFilter(_TextFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(status=self.value()) if self.value() else queryset


class AttentionFilter(_TextFilter):
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
    #: (job id, user, reason): the audited operation, which writes the event and the log entry.
    run: Callable[[int, AbstractBaseUser, str], object]


def _retry(job_id: int, user: AbstractBaseUser, reason: str) -> object:
    return operations.retry(job_id, actor=user, reason=reason)


def _cancel(job_id: int, user: AbstractBaseUser, reason: str) -> object:
    return operations.cancel(job_id, actor=user, reason=reason)


def _resolver(to: str) -> Callable[[int, AbstractBaseUser, str], object]:
    def resolve(job_id: int, user: AbstractBaseUser, reason: str) -> object:
        operations.resolve(job_id, to=to, actor=user, reason=reason)
        return None

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


@dataclass(frozen=True)
class QueueVerb:
    label: str
    done: str
    effect: str  # what happens, shown on the confirmation page
    run: Callable[..., None]  # (name, *, actor, reason)


PAUSE_PERMISSION = "django_jobs.pause_queue"
QUEUE_VERBS = {
    "pause": QueueVerb(
        "Pause", "paused",
        "Workers stop claiming its jobs within a second. Jobs running now finish; new jobs are "
        "still accepted and wait, with the pending ones, until the queue is resumed.",
        queues.pause_queue,
    ),
    "resume": QueueVerb(
        "Resume", "resumed", "Workers claim its waiting jobs at once.", queues.resume_queue,
    ),
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
    list_filter = (
        StatusFilter,
        AttentionFilter,
        QueueFilter,
        TypeFilter,
        FailedWithCodeFilter,
        ErrorCodeFilter,
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
        term = (_text_parameter("search", search_term) or "").strip()
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
        now = _database_now(job)
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

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Job | None:
        job = super().get_object(request, object_id, from_field)
        if job is not None:
            # Read by the field displays below, which see the job but not the request.
            job.shows_sensitive = self.has_view_sensitive_permission(request)  # type: ignore[attr-defined]
        return job

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> str:
        return _json_block(_visible(job, job.payload))

    @admin.display(description="checkpoint")
    def checkpoint_pretty(self, job: Job) -> str:
        if job.checkpoint is None:
            return "—"
        return _json_block(_visible(job, job.checkpoint))

    @admin.display(description="return value")
    def return_value_pretty(self, job: Job) -> str:
        if job.status != JobStatus.COMPLETED:
            return "—"
        return _json_block(_visible(job, job.return_value))

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
        age = _duration(_database_now(job) - job.heartbeat_at)
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
            return _bad_request("events_before must be an event id")
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            context.update(self._history(request, job, int(before) if before else None))
            context["external_calls"] = _external_calls(job)
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

    # ---- actions: one confirmation view for single and bulk ---------------------------------

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path("dashboard/", site.admin_view(self.dashboard_view), name="django_jobs_job_dashboard"),
            path("act/<str:action_name>/", site.admin_view(self.action_view), name="django_jobs_job_action"),
            path("queue/<str:verb>/", site.admin_view(self.queue_action_view), name="django_jobs_queue"),
            *super().get_urls(),
        ]

    def action_url(self, action_name: str, ids: list[int]) -> str:
        url = reverse(f"{self.admin_site.name}:django_jobs_job_action", args=[action_name])
        return f"{url}?{urlencode({'ids': ','.join(map(str, ids))})}"

    def allowed_actions(self, request: HttpRequest) -> list[Action]:
        return [a for a in ACTIONS.values() if request.user.has_perm(f"django_jobs.{a.permission}")]

    def forbidden(self, request: HttpRequest, what: str, needs: str) -> HttpResponse:
        """The admin's own 403 page: says what was refused and which permission it takes."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Not allowed",
            "what": what,
            "needs": needs,
        }
        return TemplateResponse(request, "admin/django_jobs/job/forbidden.html", context, status=403)

    @method_decorator(require_http_methods(["GET", "POST"]))
    def action_view(self, request: HttpRequest, action_name: str) -> HttpResponse:
        action = ACTIONS.get(action_name)
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if action is None:
            return _bad_request(f"unknown action {action_name!r}")
        if not request.user.has_perm(f"django_jobs.{action.permission}"):
            return self.forbidden(
                request, f"You may see jobs but not {action.label.lower()} them.",
                f"django_jobs.{action.permission}",
            )  # fmt: skip
        raw = (request.POST if request.method == "POST" else request.GET).get("ids", "")
        parts = [part.strip() for part in raw.split(",") if part.strip()]
        if not all(_JOB_ID.match(part) and not part.startswith("#") for part in parts):
            return _bad_request("ids must be job ids separated by commas")
        ids = sorted({int(part) for part in parts})
        if not ids or len(ids) > MAX_IDS_PER_ACTION:
            return _bad_request(f"give between 1 and {MAX_IDS_PER_ACTION} job ids")
        jobs = list(Job.objects.filter(id__in=ids).only(*CONFIRM_COLUMNS).order_by("-id"))
        if not jobs:
            raise Http404("none of these jobs exists")
        eligible = [job for job in jobs if job.status in action.eligible]
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = None
        if request.method == "POST":
            error = operations.reason_problem(reason)
            if error is None:
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
            "jobs": jobs[:CONFIRM_ROWS_SHOWN],
            "jobs_not_shown": len(jobs) - CONFIRM_ROWS_SHOWN if len(jobs) > CONFIRM_ROWS_SHOWN else 0,
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
        user = request.user
        assert isinstance(user, AbstractBaseUser)  # the admin's views admit signed-in users only
        done, refused = 0, []
        for job in jobs:
            try:
                action.run(job.id, user, reason)
            except (transitions.ActionRefused, JobNotFound) as exc:
                refused.append(str(exc))
                continue
            done += 1
        if done:
            messages.success(request, f"{action.label}: {done} job(s) done.")
        for message in refused:
            messages.warning(request, message)
        if not jobs:
            messages.warning(request, f"{action.label}: none of the selected jobs was eligible.")

    # ---- queues: pause and resume ------------------------------------------------------------

    @method_decorator(require_http_methods(["GET", "POST"]))
    def queue_action_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        """Pause or resume one queue (``?queue=NAME``): a confirmation page, then the audited
        transition, as for the jobs' actions."""
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if verb not in QUEUE_VERBS:
            return _bad_request(f"unknown queue action {verb!r}")
        if not request.user.has_perm(PAUSE_PERMISSION):
            return self.forbidden(request, f"You may see jobs but not {verb} queues.", PAUSE_PERMISSION)
        name = (request.POST if request.method == "POST" else request.GET).get("queue", "")
        if not QUEUE_RE.fullmatch(name):
            return _bad_request("queue must be a queue's name")
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = operations.reason_problem(reason) if request.method == "POST" else None
        if request.method == "POST" and error is None:
            try:
                with consolelog.audited_change(request.user) as audit:
                    QUEUE_VERBS[verb].run(name, actor=request.user.get_username(), reason=reason)
                    queue = Queue.objects.using(jobs_settings.DATABASE).get(name=name)
                    audit.log(queue, f"{QUEUE_VERBS[verb].done}: {reason}")
            except (queues.InvalidQueue, transitions.ActionRefused) as exc:
                messages.warning(request, str(exc))
            else:
                messages.success(request, f"Queue {name} {QUEUE_VERBS[verb].done}.")
            dashboard_url = reverse(f"{self.admin_site.name}:django_jobs_job_dashboard")
            return HttpResponseRedirect(f"{dashboard_url}#queues")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{QUEUE_VERBS[verb].label} queue {name}: confirm",
            "verb": QUEUE_VERBS[verb],
            "queue": name,
            "paused": next((q for q in queues.paused_queues() if q.name == name), None),
            "reason": reason,
            "error": error,
        }
        return TemplateResponse(
            request, "admin/django_jobs/job/confirm_queue_action.html", context, status=400 if error else 200
        )

    # ---- dashboard --------------------------------------------------------------------------

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Jobs dashboard",
            "board": dashboard.build(),
            "can_pause": request.user.has_perm(PAUSE_PERMISSION),
            "heartbeat_interval": jobs_settings.HEARTBEAT_INTERVAL,
        }
        return TemplateResponse(request, "admin/django_jobs/job/dashboard.html", context)


def _bad_request(text: str) -> HttpResponse:
    """A 400 that says what was wrong, as plain text: it may quote the URL, and a quote of
    ``<script>`` must never be read as markup in the admin's origin."""
    response = HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    return response


#: A job id as typed by a person: ASCII digits that fit a bigint, optionally after "#".
_JOB_ID = re.compile(r"^#?[0-9]{1,18}$")
_EVENT_ID = re.compile(r"^[0-9]{1,18}$")


class JobChangeList(ChangeList):
    """The list of jobs reads only the columns it shows (a payload may weigh 256 KiB)."""

    def get_queryset(self, request: HttpRequest, *args: Any, **kwargs: Any) -> QuerySet[Job]:
        return super().get_queryset(request, *args, **kwargs).only(*LIST_COLUMNS)


#: The job page lists this many marks of external calls, newest first.
CALLS_SHOWN = 50


@dataclass(frozen=True)
class CallShown:
    mark: ExternalCall
    #: Whether it is a mark of the execution running the job now.
    current: bool
    #: What became of the call, in words.
    state: str


def _external_calls(job: Job) -> list[CallShown]:
    """The marks of the job's external calls, newest first, each with what became of it."""
    running = job.execution_id if job.status == JobStatus.RUNNING else None
    shown = []
    for mark in ExternalCall.objects.filter(job_id=job.id).order_by("-id")[:CALLS_SHOWN]:
        current = mark.execution_id == running
        if mark.ended_at is not None:
            state = f"raised {mark.exception}" if mark.exception else "returned"
        elif current:
            state = "in progress"
        else:
            state = "no end recorded: its execution was lost during the call"
        shown.append(CallShown(mark, current, state))
    return shown


def _database_now(job: Job) -> dt.datetime:
    """The database's clock as read with the row (see ``get_queryset``)."""
    return getattr(job, "db_now", None) or timezone.now()


def _visible(job: Job, value: Any) -> Any:
    """A JSON value of the job as this viewer may see it."""
    if getattr(job, "shows_sensitive", False):
        return value
    return masking.masker_for(job.type).mask(value)


def _json_block(value: Any) -> str:
    return format_html("<pre class='djj-json'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


def _duration(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


# The schedule ticks page registers itself on import.
from django_jobs.console import schedules as schedule_admin  # noqa: E402, F401
