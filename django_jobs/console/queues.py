"""The dashboard — the queues first — and pausing and resuming a queue from it: a confirmation
page with a reason, the permission ``pause_queue``, then the audited transition of
:mod:`django_jobs.console.pausing` with its ``QueueEvent`` and the admin's log entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_http_methods

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.console import pausing
from django_jobs.console.pages import JobPages, plain_refusal, read_page
from django_jobs.console.reasons import reason_problem
from django_jobs.models import Queue
from django_jobs.names import QUEUE_RE


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
        pausing.pause_queue,
    ),
    "resume": QueueVerb(
        "Resume", "resumed", "Workers claim its waiting jobs at once.", pausing.resume_queue,
    ),
}  # fmt: skip


class QueuePages(JobPages):
    """The dashboard and the queue actions of the job admin."""

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def queue_action_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        """Pause or resume one queue (``?queue=NAME``): a confirmation page, then the audited
        transition, as for the jobs' actions."""
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if verb not in QUEUE_VERBS:
            return plain_refusal(f"unknown queue action {verb!r}")
        if not request.user.has_perm(PAUSE_PERMISSION):
            return self.forbidden(request, f"You may see jobs but not {verb} queues.", PAUSE_PERMISSION)
        name = (request.POST if request.method == "POST" else request.GET).get("queue", "")
        if not QUEUE_RE.fullmatch(name):
            return plain_refusal("queue must be a queue's name")
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = reason_problem(reason) if request.method == "POST" else None
        if request.method == "POST" and error is None:
            try:
                with consolelog.audited_change(request.user) as audit:
                    QUEUE_VERBS[verb].run(name, actor=request.user.get_username(), reason=reason)
                    queue = Queue.objects.using(jobs_settings.DATABASE).get(name=name)
                    done = QUEUE_VERBS[verb].done
                    audit.log(queue, f"{done}: {reason}", title=f"{done.capitalize()} queue {name}")
            except (pausing.InvalidQueue, transitions.ActionRefused) as exc:
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
            "paused": next((q for q in pausing.paused_queues() if q.name == name), None),
            "reason": reason,
            "error": error,
        }
        return TemplateResponse(
            request, "admin/django_jobs/job/confirm_queue_action.html", context, status=400 if error else 200
        )

    @read_page
    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        # Imported when the page is first served, with the reads it makes: a worker registers
        # the console with the admin too, and never serves it (see console/__init__.py).
        from django_jobs.console import dashboard

        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Jobs dashboard",
            "board": dashboard.build(),
            "can_pause": request.user.has_perm(PAUSE_PERMISSION),
            "can_release": request.user.has_perm("django_jobs.release_restore_hold"),
            "heartbeat_interval": jobs_settings.HEARTBEAT_INTERVAL,
        }
        return TemplateResponse(request, "admin/django_jobs/job/dashboard.html", context)
