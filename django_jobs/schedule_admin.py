"""The console's view of schedule ticks: read-only, one row per tick, with what it did.

Nobody edits a tick: the rows are the audit of the scheduler. A schedule no worker declares any
more (removed from the code or from ``SCHEDULES``) is shown as orphaned.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from django_jobs.models import ScheduleTick
from django_jobs.schedules import declared_schedules


@admin.register(ScheduleTick)
class ScheduleTickAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in the stubs
    list_display = ("schedule", "declared_as", "tick_at", "outcome", "coalesced", "job", "worker_id")
    list_filter = ("outcome", "schedule")
    search_fields = ("schedule",)
    ordering = ("-tick_at", "schedule")
    list_per_page = 100

    @admin.display(description="schedule")
    def declared_as(self, tick: ScheduleTick) -> str:
        schedule = {s.name: s for s in declared_schedules()}.get(tick.schedule)
        if schedule is None:
            return "orphaned: no longer declared"
        return f"{schedule.describe()} → {schedule.type}"

    @admin.display(description="job")
    def job(self, tick: ScheduleTick) -> str:
        if tick.job_id is None:
            return "—"
        url = reverse("admin:django_jobs_job_change", args=[tick.job_id])
        return format_html('<a href="{}">#{}</a>', url, tick.job_id)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
