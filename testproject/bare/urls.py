"""No URLs: the URLconf of a project without django_jobs installed (DJANGO_JOBS_NOT_INSTALLED)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
