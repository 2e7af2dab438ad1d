"""A read-only view of the job tables in the Django admin.

Nobody edits a payload or a status through a form: status changes go through
``transitions.py`` only, so that every one of them is guarded and recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from django_jobs.models import Job, JobEvent

if TYPE_CHECKING:  # the admin classes are generic only for the type checker
    ModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[JobEvent, Job]
else:
    ModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline


class ReadOnlyAdmin(ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobEventInline(TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = (
        "created_at",
        "kind",
        "from_status",
        "to_status",
        "attempt",
        "error_code",
        "worker_id",
        "actor",
        "reason",
    )
    readonly_fields = fields
    ordering = ("id",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "type",
        "queue",
        "status",
        "attempts",
        "max_attempts",
        "last_error_code",
        "available_at",
        "worker_id",
    )
    list_filter = ("status", "queue")
    search_fields = ("=id", "type", "=unique_key", "=last_error_code")
    list_per_page = 50
    show_full_result_count = False
    inlines = (JobEventInline,)
