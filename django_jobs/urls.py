"""URLs of django_jobs: ``path("jobs/", include("django_jobs.urls"))`` serves ``/jobs/metrics``."""

from __future__ import annotations

from django.urls import path

from django_jobs.observe.views import metrics_view

app_name = "django_jobs"
urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
]
