"""The jobs' actions in the console — retry, cancel, resolve, wake a sleeping durable job — on
one job or many: one confirmation page for both, POST with CSRF and a reason, each action behind
its own permission (``retry_job``, ``cancel_job``, ``resolve_job``, ``signal_job``), then the
audited operation of :mod:`django_jobs.console.actions` (or ``console.durable_actions``), as
``manage.py jobs`` and ``django_jobs.retry`` run it. Sending a signal takes a form of its own
(:mod:`django_jobs.console.durable_pages`).

The page is read where the console reads (``CONSOLE_DATABASE``, perhaps a replica that lags), and
its form carries what it showed of each job (:mod:`django_jobs.console.seen`); the POST acts on
the primary, on those jobs only, and each action is refused unless its job is still as shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import actions as operations
from django_jobs.console import durable_actions
from django_jobs.console import seen as shown_jobs
from django_jobs.console.pages import JobPages, plain_refusal, read_page
from django_jobs.console.reasons import reason_problem
from django_jobs.console.seen import Shown
from django_jobs.errors import JobNotFound
from django_jobs.models import Job
from django_jobs.reads.search import JOB_ID
from django_jobs.states import JobStatus

MAX_IDS_PER_ACTION = 1000
#: The confirmation page lists this many of the selected jobs and counts the rest.
CONFIRM_ROWS_SHOWN = 100
#: What the confirmation page reads of each selected job.
CONFIRM_COLUMNS = (
    "type", "queue", "max_attempts", "last_error_code", *shown_jobs.COLUMNS,
)  # fmt: skip


class Run(Protocol):
    """The audited operation, which writes the event and the log entry: (job id, user, reason,
    what the page showed of the job, if the form said)."""

    def __call__(
        self, job_id: int, user: AbstractBaseUser, reason: str, seen: Shown | None = None, /
    ) -> object: ...


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    permission: str  # codename in the django_jobs app
    eligible: frozenset[str]
    effect: str  # what happens, shown on the confirmation page
    run: Run


def _retry(job_id: int, user: AbstractBaseUser, reason: str, seen: Shown | None = None, /) -> object:
    return operations.retry(job_id, actor=user, reason=reason, seen=seen)


def _cancel(job_id: int, user: AbstractBaseUser, reason: str, seen: Shown | None = None, /) -> object:
    return operations.cancel(job_id, actor=user, reason=reason, seen=seen)


def _wake(job_id: int, user: AbstractBaseUser, reason: str, seen: Shown | None = None, /) -> object:
    return durable_actions.wake(job_id, actor=user, reason=reason, seen=seen)


def _resolver(to: str) -> Run:
    def resolve(job_id: int, user: AbstractBaseUser, reason: str, seen: Shown | None = None, /) -> object:
        operations.resolve(job_id, to=to, actor=user, reason=reason, seen=seen)
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
            "cancel", "Cancel", "cancel_job",
            frozenset({JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING}),
            "a pending or waiting job is cancelled at once (the workflow steps after a waiting one are "
            "stopped); a running one is asked to stop and ends cancelled",
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
        Action(
            "wake", "Wake now", durable_actions.PERMISSION, frozenset({JobStatus.PENDING}),
            "that sleeps (a durable job in ctx.sleep) has its sleep ended and is due now; a pending job "
            "that does not sleep is refused", _wake,
        ),
    )
}  # fmt: skip


class JobActionPages(JobPages):
    """The confirmation page of the jobs' actions, and what the list and a job's page link to."""

    def action_url(self, action_name: str, ids: list[int]) -> str:
        url = reverse(f"{self.admin_site.name}:django_jobs_job_action", args=[action_name])
        return f"{url}?{urlencode({'ids': ','.join(map(str, ids))})}"

    def allowed_actions(self, request: HttpRequest) -> list[Action]:
        return [a for a in ACTIONS.values() if request.user.has_perm(f"django_jobs.{a.permission}")]

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def action_view(self, request: HttpRequest, action_name: str) -> HttpResponse:
        action = ACTIONS.get(action_name)
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if action is None:
            return plain_refusal(f"unknown action {action_name!r}")
        if not request.user.has_perm(f"django_jobs.{action.permission}"):
            return self.forbidden(
                request, f"You may see jobs but not {action.label.lower()} them.",
                f"django_jobs.{action.permission}",
            )  # fmt: skip
        raw = (request.POST if request.method == "POST" else request.GET).get("ids", "")
        parts = [part.strip() for part in raw.split(",") if part.strip()]
        if not all(JOB_ID.match(part) and not part.startswith("#") for part in parts):
            return plain_refusal("ids must be job ids separated by commas")
        ids = sorted({int(part) for part in parts})
        if not ids or len(ids) > MAX_IDS_PER_ACTION:
            return plain_refusal(f"give between 1 and {MAX_IDS_PER_ACTION} job ids")
        shown: dict[int, Shown] | None = None
        if request.method == "POST" and "seen" in request.POST:
            try:
                shown = shown_jobs.decode(request.POST["seen"])
            except ValueError as exc:
                return plain_refusal(str(exc))
            shown = {job_id: job for job_id, job in shown.items() if job_id in ids}
        # A GET reads where the page reads; a POST reads the primary, where it acts.
        found = Job.objects.using(jobs_settings.DATABASE).filter(id__in=ids).only(*CONFIRM_COLUMNS)
        jobs = list(found.order_by("-id"))
        if not jobs:
            raise Http404("none of these jobs exists")
        eligible = [job for job in jobs if job.status in action.eligible]
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = None
        if request.method == "POST":
            error = reason_problem(reason)
            if error is None:
                # What the page showed, if its form said; else the jobs as the primary has them.
                targets: dict[int, Shown | None] = (
                    {job.id: None for job in eligible} if shown is None else dict(shown)
                )
                self._perform(request, action, targets, reason)
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
            "seen": shown_jobs.encode(Shown.of(job) for job in eligible),
            "reason": reason,
            "error": error,
        }
        return TemplateResponse(
            request, "admin/django_jobs/job/confirm_action.html", context, status=400 if error else 200
        )

    def _perform(
        self, request: HttpRequest, action: Action, jobs: dict[int, Shown | None], reason: str
    ) -> None:
        """Run ``action`` on each of ``jobs`` (by id: what the page showed of it, or None)."""
        user = request.user
        assert isinstance(user, AbstractBaseUser)  # the admin's views admit signed-in users only
        done, refused = 0, []
        # In id order, as a bulk operation acts: where two of them cannot both be done (one
        # unique key), the older one is.
        for job_id, seen in sorted(jobs.items()):
            try:
                action.run(job_id, user, reason, seen)
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


def bulk(action_name: str) -> Callable[[JobActionPages, HttpRequest, QuerySet[Job]], HttpResponse]:
    """The list's bulk action for ``action_name``: it leads to the confirmation page."""
    action = ACTIONS[action_name]

    def bulk_action(
        model_admin: JobActionPages, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse:
        ids = list(queryset.values_list("id", flat=True)[: MAX_IDS_PER_ACTION + 1])
        return HttpResponseRedirect(model_admin.action_url(action.name, ids))

    bulk_action.__name__ = f"{action_name}_selected"
    return admin.action(description=f"{action.label} selected jobs…", permissions=[action.name])(bulk_action)
