"""What every page of the console shares: the base of the job admin's pages (the list and a
job's page, the actions' confirmation, the dashboard and its queues), where a page that reads
reads from (:func:`read_page`), and the refusals, one shape each: a 400 as plain text, and the
admin's own 403 page that names the permission it takes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse, TemplateResponse

from django_jobs.models import Job
from django_jobs.reads import replica

P = ParamSpec("P")
A = TypeVar("A")

if TYPE_CHECKING:  # the admin classes are generic only for the type checker
    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


class JobPages(_ModelAdmin):
    """The base of the job admin's parts (:mod:`~django_jobs.console.jobs`,
    :mod:`~django_jobs.console.job_actions`, :mod:`~django_jobs.console.queues`), which
    :class:`~django_jobs.console.jobs.JobAdmin` puts together."""

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


def plain_refusal(text: str, status: int = 400) -> HttpResponse:
    """A refusal that says what was wrong, as plain text: it may quote the URL, and a quote of
    ``<script>`` must never be read as markup in the admin's origin."""
    response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    return response


def read_page(
    view: Callable[Concatenate[A, HttpRequest, P], HttpResponse],
) -> Callable[Concatenate[A, HttpRequest, P], HttpResponse]:
    """A view of the job admin whose GET and HEAD read from ``CONSOLE_DATABASE`` and say how far
    behind it is: the template gets ``replica``, the lag (``reads.replica.Lag``), None when the
    pages read the primary. The page is rendered within, so that the reads its template makes
    go there too. Any other method acts, and runs on the primary.
    """

    @functools.wraps(view)
    def page(admin_page: A, request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return view(admin_page, request, *args, **kwargs)
        with replica.console_reads() as lag:
            response = view(admin_page, request, *args, **kwargs)
            if lag is not None and isinstance(response, SimpleTemplateResponse):
                if response.context_data is not None:
                    response.context_data["replica"] = lag
                response.render()
        return response

    return page
