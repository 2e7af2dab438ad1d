"""Declaring a restore and releasing a restore hold from the console: a confirmation page with
a reason (and, for a release, the jobs the operator checked with the provider), the permission
``release_restore_hold``, then the audited action of :mod:`django_jobs.console.restore_holds`
with the admin's log entry. The same actions as ``manage.py jobsrestore``.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_http_methods

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console import audit as consolelog
from django_jobs.console import restore_holds
from django_jobs.console.pages import JobPages, plain_refusal
from django_jobs.console.reasons import reason_problem
from django_jobs.models import RestoreHold
from django_jobs.names import MAX_JOB_ID

RELEASE_PERMISSION = "django_jobs.release_restore_hold"
RESTORE_VERBS = {
    "declare": (
        "Declare a restore",
        "No worker starts a job whose effects may be outside the database until the hold is "
        "released. Declare a restore the workers cannot see: a copy of the data directory put "
        "back, or business tables restored alone.",
    ),
    "release": (
        "Release the restore hold",
        "The held jobs of types with reconcile ask their provider before they run again; the "
        "others are parked for review, unless you say below what you found for them.",
    ),
}
_IDS = re.compile(r"[\s,]+")


def parse_job_ids(text: str, field: str) -> list[int]:
    """Job ids written by a person: separated by spaces or commas. Raises ``ValueError``."""
    ids = []
    for word in _IDS.split(text.strip()):
        if not word:
            continue
        if not word.isdigit() or not 1 <= int(word) <= MAX_JOB_ID:
            raise ValueError(f"{field}: {word[:40]!r} is not a job id")
        ids.append(int(word))
    return ids


class RestorePages(JobPages):
    """The restore hold's actions of the job admin."""

    @method_decorator(require_http_methods(["GET", "POST"]))
    def restore_action_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if verb not in RESTORE_VERBS:
            return plain_refusal(f"unknown restore action {verb!r}")
        if not request.user.has_perm(RELEASE_PERMISSION):
            return self.forbidden(request, "You may see jobs but not declare or release restore holds.",
                                  RELEASE_PERMISSION)  # fmt: skip
        form = request.POST if request.method == "POST" else request.GET
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        done_text, not_done_text = form.get("done", ""), form.get("not_done", "")
        error = None
        if request.method == "POST":
            error = reason_problem(reason)
            if error is None:
                error = self._act(request, verb, reason, done_text, not_done_text)
            if error is None:
                return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_jobs_job_dashboard"))
        found = restore_holds.status()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{RESTORE_VERBS[verb][0]}: confirm",
            "verb": verb,
            "label": RESTORE_VERBS[verb][0],
            "effect": RESTORE_VERBS[verb][1],
            "status": found,
            "waiting": sorted(found.waiting.items()),
            "reason": reason,
            "done": done_text,
            "not_done": not_done_text,
            "error": error,
        }
        template = "admin/django_jobs/job/confirm_restore_action.html"
        return TemplateResponse(request, template, context, status=400 if error else 200)

    def _act(
        self, request: HttpRequest, verb: str, reason: str, done_text: str, not_done_text: str
    ) -> str | None:
        """Declare or release; None when done, else what is wrong (nothing was written)."""
        actor = request.user.get_username()
        try:
            with consolelog.audited_change(request.user) as audit:
                if verb == "declare":
                    hold_id = restore_holds.declare(actor=actor, reason=reason)
                    message = f"Restore hold {hold_id} declared: jobs of external types wait."
                    logged, title = f"declared: {reason}", f"Declared restore hold {hold_id}"
                else:
                    released = restore_holds.release(
                        actor=actor,
                        reason=reason,
                        hold_id=_hold_id(request.POST.get("hold", "")),
                        done=parse_job_ids(done_text, "done"),
                        not_done=parse_job_ids(not_done_text, "not done"),
                    )
                    hold_id, settled = released.hold_id, released.settled
                    message = (
                        f"Restore hold {hold_id} released: {settled.to_reconcile} job(s) reconcile first, "
                        f"{settled.to_review} parked for review, {settled.done} completed and "
                        f"{settled.not_done} run again as you said, {settled.running} running."
                    )
                    logged, title = f"released: {reason}", f"Released restore hold {hold_id}"
                hold = RestoreHold.objects.using(jobs_settings.DATABASE).get(id=hold_id)
                audit.log(hold, logged, title=title)
        except (ValueError, transitions.ActionRefused) as exc:
            return str(exc)
        messages.success(request, message)
        return None


def _hold_id(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or len(text) > 19:
        raise ValueError(f"{text[:40]!r} is not a restore hold's id")
    return int(text)
