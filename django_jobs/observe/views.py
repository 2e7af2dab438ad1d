"""The metrics view: the database's per-queue state, its durable jobs asleep and waiting, and
this process's own counters, for Prometheus. Include it with
``path("jobs/", include("django_jobs.urls"))``: ``/jobs/metrics``.

With ``CONSOLE_DATABASE``, the per-queue state is read from that replica, as the console's pages
are, and the scrape says how far behind it is (``django_jobs_console_replica_lag_seconds``).

A scrape presents ``DJANGO_JOBS["METRICS_TOKEN"]`` as a bearer token, or comes from a signed in
staff user; anything else is refused (401, or 403 for a signed in user who is not staff), since
queue names, job types and error codes say much about a product.
"""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_jobs.conf import jobs_settings
from django_jobs.observe import exposition, metrics
from django_jobs.reads.bounded import bounded_reads
from django_jobs.reads.durable import durable_counts
from django_jobs.reads.queues import queue_rows
from django_jobs.reads.replica import Lag, console_reads


@require_GET
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = _refusal(request)
    if refused is not None:
        return refused
    if not metrics.usable():
        return HttpResponse(
            "prometheus-client is not installed: pip install django-jobs-pg[prometheus]\n",
            status=501,
            content_type="text/plain; charset=utf-8",
        )
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    metrics.recorder()  # this process's counters exist, at zero, from the first scrape
    with console_reads() as lag:
        state = CollectorRegistry(auto_describe=False)
        state.register(_QueueState(lag))
        body = generate_latest(state)
    own = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # gunicorn's workers each keep their counters in files; one scrape sums them all.
        from prometheus_client import multiprocess

        own = CollectorRegistry()
        multiprocess.MultiProcessCollector(own)  # type: ignore[no-untyped-call]
    body += generate_latest(own)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


class _QueueState:
    """Reads the per-queue figures at each scrape: the numbers of the dashboard's queue table
    and of its durable jobs, and the lag of the replica they were read from, if they were."""

    def __init__(self, lag: Lag | None) -> None:
        self.lag = lag

    def collect(self):  # type: ignore[no-untyped-def]
        with bounded_reads():  # one transaction for both reads, as the dashboard's
            rows, durable = queue_rows(), durable_counts()
        yield from exposition.queue_families(rows)
        yield from exposition.durable_families(durable)
        if self.lag is not None:
            yield exposition.replica_family(self.lag)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics, else the response that refuses it."""
    header = request.headers.get("Authorization", "")
    scheme = header.partition(" ")[0]
    if scheme.lower() == "bearer":
        token = jobs_settings.METRICS_TOKEN
        if token and exposition.bearer_token_matches(header, token):
            return None
        return _unauthorized("invalid token")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return _unauthorized("a bearer token or a staff user's session is required")
    if not (user.is_active and user.is_staff):
        return HttpResponse("staff only\n", status=403, content_type="text/plain; charset=utf-8")
    return None


def _unauthorized(why: str) -> HttpResponse:
    response = HttpResponse(f"{why}\n", status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = 'Bearer realm="django_jobs"'
    return response
