"""The console's *Send signal…* page for a durable job: a form of the signal's name (the one the
job waits for, if it waits), its data as JSON and a reason, POST with CSRF behind the
``signal_job`` permission, then the audited :func:`django_jobs.console.durable_actions.send_signal`.

A bad name, data that is not JSON (or not plain JSON, or too large) or a missing reason is said
on the form again, with what was typed; nothing is written then.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_http_methods

from django_jobs.conf import jobs_settings
from django_jobs.console import durable_actions
from django_jobs.console.pages import JobPages, read_page
from django_jobs.console.reasons import reason_problem
from django_jobs.durable_rules import InvalidSignal
from django_jobs.errors import JobNotFound
from django_jobs.models import Job
from django_jobs.reads import durable as durable_reads
from django_jobs.transitions import ActionRefused

PERMISSION = f"django_jobs.{durable_actions.PERMISSION}"
#: The statuses of a job that takes a signal (one that has ended takes none).
TAKES_SIGNALS = frozenset({"pending", "running", "waiting"})


class DurablePages(JobPages):
    """The signal page of the job admin."""

    def signal_url(self, job_id: int) -> str:
        return reverse(f"{self.admin_site.name}:django_jobs_job_signal", args=[job_id])

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def signal_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        if not request.user.has_perm(PERMISSION):
            return self.forbidden(request, "You may see jobs but not send them signals.", PERMISSION)
        found = Job.objects.using(jobs_settings.DATABASE).only("type", "queue", "status")
        job = found.filter(id=job_id).first()
        if job is None:
            raise Http404(f"no job has id {job_id}")
        parked = durable_reads.suspension(job.id)
        waits_for = parked.name if parked is not None and parked.kind == "wait" else ""
        form = {"name": waits_for, "data": "", "reason": ""}
        error = None
        if request.method == "POST":
            form = {field: request.POST.get(field, "").strip() for field in form}
            error = self._send(request, job.id, form)
            if error is None:
                page = reverse(f"{self.admin_site.name}:django_jobs_job_change", args=[job.id])
                return HttpResponseRedirect(page)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Send a signal to job {job.id}",
            "job": job,
            "suspension": parked,
            "takes_signals": job.status in TAKES_SIGNALS,
            "form": form,
            "error": error,
        }
        return TemplateResponse(
            request, "admin/django_jobs/job/send_signal.html", context, status=400 if error else 200
        )

    def _send(self, request: HttpRequest, job_id: int, form: dict[str, str]) -> str | None:
        """Send the form's signal; what was wrong with it, or None once it is sent."""
        error = reason_problem(form["reason"])
        if error is not None:
            return error
        user = request.user
        assert isinstance(user, AbstractBaseUser)  # the admin's views admit signed-in users only
        try:
            data = durable_actions.parse_data(form["data"])
            stored = durable_actions.send_signal(
                job_id, form["name"], data, reason=form["reason"], actor=user
            )
        except (InvalidSignal, ValueError, ActionRefused, JobNotFound) as exc:
            return str(exc)
        if stored:
            messages.success(request, f"Signal {form['name']!r} sent to job {job_id}.")
        else:
            messages.warning(
                request, f"Signal {form['name']!r} was not stored: job {job_id} had one of that name "
                "already, and the first one stands. Your action is in its history.",
            )  # fmt: skip
        return None
