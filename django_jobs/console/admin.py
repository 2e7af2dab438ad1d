"""The console's pages, registered with Django's admin (``django_jobs.admin`` imports this
module, which ``admin.autodiscover()`` finds): the jobs (:mod:`~django_jobs.console.jobs`, with
the actions' confirmation, the dashboard and the queue actions) and the schedules with their
ticks (:mod:`~django_jobs.console.schedules`)."""

from __future__ import annotations

from django.contrib import admin

from django_jobs.console.jobs import JobAdmin
from django_jobs.console.schedules import ScheduleTickAdmin
from django_jobs.models import Job, ScheduleTick

admin.site.register(Job, JobAdmin)
admin.site.register(ScheduleTick, ScheduleTickAdmin)

__all__ = ["JobAdmin", "ScheduleTickAdmin"]
