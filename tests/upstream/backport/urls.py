# ruff: noqa  # vendored from django-tasks 0.12.0 (tests/), BSD licence: see LICENSE.
# Retargeted at django_jobs' JobsBackend; every change is marked "Adapted (django_jobs)".
from django.urls import path

from . import views

urlpatterns = [
    path("meaning-of-life/", views.calculate_meaning_of_life, name="meaning-of-life"),
    path("result/<str:result_id>", views.get_task_result, name="result"),
    path(
        "meaning-of-life-async/",
        views.calculate_meaning_of_life_async,
        name="meaning-of-life-async",
    ),
    # Adapted (django_jobs): the admin is the test project's, at its own URLs.
]
