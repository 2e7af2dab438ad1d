"""The console's action on every job a list's filter matches: "Retry all matching…" and
"Cancel all matching…" on a filtered list, the confirmation page (how many, counted or
estimated, a sample, a reason, a pace), the operation's page (its progress, what was skipped
and why, a stop button) and the list of operations.

Each action needs its permission (``retry_job``, ``cancel_job``), as on one job: without it the
list shows no such link and a forged POST is refused with a 403, before anything is read. The
pages read where the console reads (``CONSOLE_DATABASE``); starting or stopping an operation
runs on the primary, which takes the jobs as they are there.

The filter is the list's own query string, read by :func:`filter_from_list` into a
``JobFilter``; a list filter that cannot be acted on as a whole (stale running jobs, a restore
hold's) is refused, as is a list with no filter at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_http_methods

from django_jobs.conf import jobs_settings
from django_jobs.console import bulk
from django_jobs.console.job_filter import InvalidFilter, JobFilter, describe, parse_moment
from django_jobs.console.pages import JobPages, plain_refusal, read_page
from django_jobs.console.reasons import reason_problem
from django_jobs.models import BulkAction, BulkOperation, BulkOperationJob, BulkOutcome, BulkState, Job
from django_jobs.states import JobStatus

PERMISSIONS = {BulkAction.RETRY: "django_jobs.retry_job", BulkAction.CANCEL: "django_jobs.cancel_job"}
LABELS = {BulkAction.RETRY: "Retry", BulkAction.CANCEL: "Cancel"}
#: The list's parameters that say how it is shown, not which jobs it holds.
_PRESENTATION = frozenset({"o", "p", "e", "all", "_changelist_filters"})
#: The list's filters that cannot be acted on as a whole, and why.
_NOT_ACTIONABLE = {
    "restore": "a restore hold's jobs are settled by releasing the hold (Restore holds)",
}
#: The skipped jobs an operation's page lists.
SKIPPED_SHOWN = 50
OPERATIONS_SHOWN = 50


def filter_from_list(params: QueryDict) -> JobFilter:
    """The ``JobFilter`` of the job list's query string. Raises ``InvalidFilter`` for a filter
    that cannot be acted on as a whole, and for none at all."""
    unknown = sorted(set(params) - _PRESENTATION - _LIST_PARTS.keys() - _NOT_ACTIONABLE.keys())
    if unknown:
        raise InvalidFilter(f"the list's {unknown[0][:40]!r} parameter is not a filter of jobs")
    for name, why in _NOT_ACTIONABLE.items():
        if params.get(name):
            raise InvalidFilter(f"the {name} filter cannot be acted on as a whole: {why}")
    parts: dict[str, Any] = {}
    for name, read in _LIST_PARTS.items():
        value = params.get(name, "")
        if value:
            for part, part_value in read(value).items():
                if parts.get(part, part_value) != part_value:
                    raise InvalidFilter(
                        f"the list's filters contradict each other: {part} {parts[part]} and {part_value}"
                    )
                parts[part] = part_value
    if not parts:
        raise InvalidFilter("choose a filter first: the console does not act on every job there is")
    return JobFilter(**parts)


def _attention(value: str) -> dict[str, Any]:
    if value == "review":
        return {"status": JobStatus.NEEDS_REVIEW}
    if value == "stale":
        raise InvalidFilter("stale running jobs cannot be acted on as a whole: the reaper recovers them")
    raise InvalidFilter(f"{value[:40]!r} is not an attention filter")


def _workflow(value: str) -> dict[str, Any]:
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise InvalidFilter(f"{value[:40]!r} is not a workflow id")
    return {"workflow": int(value)}


#: The list's filters, each read into the parts of a ``JobFilter`` it gives.
_LIST_PARTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "status": lambda value: {"status": value},
    "queue": lambda value: {"queue": value},
    "type": lambda value: {"type": value},
    "error_code": lambda value: {"code": value},
    "failed_code": lambda value: {"status": JobStatus.FAILED, "code": value},
    "attention": _attention,
    "workflow": _workflow,
    "ended": lambda value: {"ended_since": parse_moment(value, "ended")},
    "q": lambda value: {"search": value},
}


class BulkPages(JobPages):
    """The pages of the job admin that act on every job a filter matches."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "bulk_links": self.bulk_links(request)}
        return super().changelist_view(request, context)

    def bulk_links(self, request: HttpRequest) -> list[tuple[str, str]]:
        """The list's "… all matching" links this user may follow, for the list's filter; none
        when the filter cannot be acted on as a whole."""
        try:
            filter_from_list(request.GET)
        except InvalidFilter:
            return []
        query = request.GET.urlencode()
        return [
            (f"{LABELS[action]} all matching…", f"{self._url('django_jobs_bulk', action)}?{query}")
            for action in (BulkAction.RETRY, BulkAction.CANCEL)
            if request.user.has_perm(PERMISSIONS[action])
        ]

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def bulk_view(self, request: HttpRequest, action: str) -> HttpResponse:
        if action not in PERMISSIONS:
            return plain_refusal(f"unknown action {action[:40]!r}")
        refused = self._refusal(request, PERMISSIONS[BulkAction(action)], f"{action} jobs")
        if refused is not None:
            return refused
        try:
            job_filter = filter_from_list(request.GET)
            seen = bulk.matching(action, job_filter)
        except InvalidFilter as exc:
            return plain_refusal(str(exc))
        reason, pace, error = "", bulk.DEFAULT_PACE[BulkAction(action)], None
        if request.method == "POST":
            reason = request.POST.get("reason", "").strip()
            pace_text = request.POST.get("pace", "").strip()
            error = reason_problem(reason) or _pace_problem(pace_text)
            if error is None:
                try:
                    operation = bulk.start(action, job_filter, reason=reason, actor=self._user(request),
                                           pace=int(pace_text))  # fmt: skip
                except ValueError as exc:
                    error = str(exc)
                else:
                    messages.success(request, f"{operation}: started.")
                    return HttpResponseRedirect(self._url("django_jobs_operation", operation.id))
            pace = int(pace_text) if pace_text.isascii() and pace_text.isdigit() else pace
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{LABELS[BulkAction(action)]} every job matching {job_filter.describe()}",
            "label": LABELS[BulkAction(action)],
            "matching": seen,
            "cap": bulk.MAX_OPERATION_JOBS,
            "max_pace": bulk.MAX_PACE,
            "pace": pace,
            "reason": reason,
            "error": error,
            "list_url": f"{self._url('django_jobs_job_changelist')}?{request.GET.urlencode()}",
        }
        template = "admin/django_jobs/job/bulk_confirm.html"
        return TemplateResponse(request, template, context, status=400 if error else 200)

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def operation_view(self, request: HttpRequest, operation_id: int) -> HttpResponse:
        refused = self._refusal(request, None, "")
        if refused is not None:
            return refused
        alias = jobs_settings.DATABASE
        operation = BulkOperation.objects.using(alias).filter(id=operation_id).first()
        if operation is None:
            return plain_refusal(f"no bulk operation has id {operation_id}", status=404)
        permission = PERMISSIONS[BulkAction(operation.action)]
        may_stop = request.user.has_perm(permission)
        reason, error = "", None
        if request.method == "POST":
            if not may_stop:
                return self.forbidden(
                    request, f"You may see jobs but not {operation.action} them.", permission
                )
            reason = request.POST.get("reason", "").strip()
            error = reason_problem(reason, kept_in="the operation's record")
            if error is None:
                if bulk.stop_operation(operation.id, reason=reason, actor=self._user(request)):
                    messages.success(request, f"{operation}: stopped. The jobs acted on already stay so.")
                else:
                    messages.warning(request, f"{operation} had ended already.")
                return HttpResponseRedirect(request.path)
        skipped = (
            BulkOperationJob.objects.using(alias)
            .filter(operation_id=operation.id)
            .exclude(outcome=BulkOutcome.DONE)
            .exclude(outcome__isnull=True)
            .order_by("job_id")
        )
        runner = Job.objects.using(alias).only("id", "status", "attempts").filter(id=operation.job_id or 0)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": str(operation),
            "operation": operation,
            "described": describe(operation.filter),
            "running": operation.state == BulkState.RUNNING,
            "runner": runner.first(),
            "skipped": [
                (item.job_id, item.detail or BulkOutcome(str(item.outcome)).label)
                for item in skipped[:SKIPPED_SHOWN]
            ],
            "may_stop": may_stop,
            "reason": reason,
            "error": error,
        }
        template = "admin/django_jobs/job/bulk_operation.html"
        return TemplateResponse(request, template, context, status=400 if error else 200)

    @read_page
    def operations_view(self, request: HttpRequest) -> HttpResponse:
        refused = self._refusal(request, None, "")
        if refused is not None:
            return refused
        newest = BulkOperation.objects.using(jobs_settings.DATABASE).order_by("-id")[:OPERATIONS_SHOWN]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Bulk operations",
            "operations": [(op, describe(op.filter)) for op in newest],
        }
        return TemplateResponse(request, "admin/django_jobs/job/bulk_operations.html", context)

    def _refusal(self, request: HttpRequest, permission: str | None, what: str) -> HttpResponse | None:
        """The 403 of a user who may not see jobs, or (for a POST) may not do ``what``."""
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if permission is not None and not request.user.has_perm(permission):
            return self.forbidden(request, f"You may see jobs but not {what}.", permission)
        return None

    def _url(self, name: str, *args: Any) -> str:
        return reverse(f"{self.admin_site.name}:{name}", args=args)

    @staticmethod
    def _user(request: HttpRequest) -> AbstractBaseUser:
        user = request.user
        assert isinstance(user, AbstractBaseUser), "the admin's views need a signed-in user"
        return user


def _pace_problem(text: str) -> str | None:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= bulk.MAX_PACE:
        return f"The pace is jobs per second: a whole number from 1 to {bulk.MAX_PACE:,}."
    return None
