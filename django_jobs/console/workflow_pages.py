"""A workflow's page in the console: its jobs drawn stage by stage (inline SVG), their counts by
status, the first of them listed, and the action that cancels the whole workflow (the
permission ``cancel_job``, a reason, the admin's log). Each member's page links here.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_http_methods

from django_jobs.conf import jobs_settings
from django_jobs.console import actions
from django_jobs.console.pages import JobPages, read_page
from django_jobs.console.reasons import reason_problem
from django_jobs.console.workflow_drawing import boxes, svg
from django_jobs.models import Workflow
from django_jobs.reads import workflows as reads
from django_jobs.states import ACTIVE_STATUSES
from django_jobs.transitions import ActionRefused

#: Members listed on the page, in the order they were written; the job list shows them all.
LISTED = 200
CANCEL_PERMISSION = "django_jobs.cancel_job"


class WorkflowPages(JobPages):
    """The workflow page of the job admin."""

    @method_decorator(require_http_methods(["GET", "POST"]))
    @read_page
    def workflow_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            return self.forbidden(request, "You may not see jobs.", "django_jobs.view_job")
        workflow = Workflow.objects.using(jobs_settings.DATABASE).filter(id=workflow_id).first()
        if workflow is None:
            return self.forbidden(request, f"No workflow has id {workflow_id}.", "an existing workflow")
        may_cancel = request.user.has_perm(CANCEL_PERMISSION)
        reason, error = "", None
        if request.method == "POST":
            if not may_cancel:
                return self.forbidden(request, "You may see jobs but not cancel them.", CANCEL_PERMISSION)
            reason = request.POST.get("reason", "").strip()
            error = reason_problem(reason)
            if error is None:
                try:
                    user = request.user
                    assert isinstance(user, AbstractBaseUser), "the admin's views need a signed-in user"
                    cancelled, requested = actions.cancel_workflow(workflow.id, reason=reason, actor=user)
                except (ValueError, LookupError, ActionRefused) as exc:
                    error = str(exc)
                else:
                    messages.success(
                        request, f"Workflow {workflow.id} cancelled: {cancelled} job(s) cancelled, "
                        f"{requested} running job(s) asked to stop."
                    )  # fmt: skip
                    return HttpResponseRedirect(request.path)
        counts = reads.member_statuses(workflow.id)
        job_url = reverse(f"{self.admin_site.name}:django_jobs_job_change", args=[0]).replace("/0/", "/{}/")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Workflow {workflow.id}" + (f": {workflow.name}" if workflow.name else ""),
            "workflow": workflow,
            "counts": sorted(counts.items()),
            "live": sum(count for status, count in counts.items() if status in ACTIVE_STATUSES),
            "drawing": svg(boxes(workflow.id, job_url)),
            "members": reads.members(workflow.id, LISTED),
            "more": max(0, sum(counts.values()) - LISTED),
            "may_cancel": may_cancel,
            "reason": reason,
            "error": error,
        }
        template = "admin/django_jobs/job/workflow.html"
        return TemplateResponse(request, template, context, status=400 if error else 200)
