"""The console's schedules page: each schedule (its expression in words, next run, last run and
its status, enabled or disabled) above the ticks it fired.

The ticks are read-only: they are the scheduler's audit. Disabling, enabling and running a
schedule now take the ``manage_schedule`` permission and a reason, and are recorded as a
``ScheduleEvent`` and in the admin's log, in one transaction with the change itself. A schedule
no worker declares any more (removed from the code or from ``SCHEDULES``) is shown as orphaned.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods

from django_jobs import transitions
from django_jobs.console import audit as consolelog
from django_jobs.console.pages import plain_refusal
from django_jobs.console.reasons import reason_problem
from django_jobs.maintenance.periodic import run_now
from django_jobs.models import Job, ScheduleState, ScheduleTick
from django_jobs.reads.clock import database_now
from django_jobs.registry import declared_schedules
from django_jobs.schedules import Schedule

MANAGE_PERMISSION = "django_jobs.manage_schedule"


@dataclass(frozen=True)
class ScheduleVerb:
    label: str
    done: str
    effect: str  # what happens, shown on the confirmation page
    #: Whether the verb needs the schedule declared in this process (run now does).
    needs_declaration: bool


SCHEDULE_VERBS = {
    "disable": ScheduleVerb(
        "Disable", "disabled",
        "Its next ticks are recorded as disabled and enqueue nothing, until it is enabled. A job "
        "it already enqueued is not touched.", False,
    ),
    "enable": ScheduleVerb("Enable", "enabled", "It fires again from its next tick on.", False),
    "run": ScheduleVerb(
        "Run now", "run now",
        "Its job is enqueued at once, with the schedule's payload, queue and priority. The next "
        "tick fires as planned: this run neither replaces it nor makes it skip.", True,
    ),
}  # fmt: skip


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

    # ---- the schedules above the ticks --------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        now = database_now()
        context = {
            **(extra_context or {}),
            "db_now": now,
            "schedule_rows": schedule_rows(now),
            "can_manage": request.user.has_perm(MANAGE_PERMISSION),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.schedule_action_view)
        return [path("schedule/<str:verb>/", view, name="django_jobs_schedule"), *super().get_urls()]

    @method_decorator(require_http_methods(["GET", "POST"]))
    def schedule_action_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        """Disable, enable or run now one schedule (``?schedule=NAME``): a confirmation page
        with a reason, then the audited change."""
        if verb not in SCHEDULE_VERBS:
            return plain_refusal(f"unknown schedule action {verb!r}", status=400)
        if not request.user.has_perm(MANAGE_PERMISSION):
            return plain_refusal(f"You may not {verb} schedules: it takes {MANAGE_PERMISSION}.", status=403)
        action = SCHEDULE_VERBS[verb]
        name = (request.POST if request.method == "POST" else request.GET).get("schedule", "")
        declared = {s.name: s for s in declared_schedules()}
        known = name in declared or ScheduleTick.objects.filter(schedule=name).exists()
        if not known or (action.needs_declaration and name not in declared):
            return plain_refusal("schedule must name a declared schedule", status=400)
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        error = reason_problem(reason, kept_in="the schedule's history") if request.method == "POST" else None
        if request.method == "POST" and error is None:
            actor = request.user.get_username()
            try:
                with consolelog.audited_change(request.user) as audit:  # change, event and log
                    done = _apply(verb, declared.get(name), name, actor, reason)
                    audit.log(
                        ScheduleState(name=name), f"Schedule {name} {action.done}: {reason}",
                        title=f"{action.done.capitalize()}: schedule {name}",
                    )  # fmt: skip
            except transitions.ActionRefused as exc:
                messages.warning(request, str(exc))
            else:
                messages.success(request, f"Schedule {name} {action.done}{done}.")
            changelist = reverse(f"{self.admin_site.name}:django_jobs_scheduletick_changelist")
            return HttpResponseRedirect(changelist)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{action.label} schedule {name}: confirm",
            "verb": action,
            "schedule": name,
            "reason": reason,
            "error": error,
        }
        return TemplateResponse(
            request,
            "admin/django_jobs/scheduletick/confirm_schedule_action.html",
            context,
            status=400 if error else 200,
        )


def _apply(verb: str, schedule: Schedule | None, name: str, actor: str, reason: str) -> str:
    """Make the change; says what it enqueued, if anything."""
    changes: dict[str, Callable[..., None]] = {
        "disable": transitions.disable_schedule,
        "enable": transitions.enable_schedule,
    }
    if verb in changes:
        changes[verb](name, actor=actor, reason=reason)
        return ""
    assert schedule is not None
    return f": job #{run_now(schedule, actor=actor, reason=reason)}"


@dataclass(frozen=True)
class ScheduleRow:
    name: str
    schedule: Schedule | None  # None: orphaned
    words: str
    next_run: dt.datetime | None
    last: ScheduleTick | None
    last_status: str | None
    state: ScheduleState | None


def schedule_rows(now: dt.datetime) -> list[ScheduleRow]:
    """Every declared schedule, and every schedule with ticks but no declaration (orphaned)."""
    declared = {s.name: s for s in declared_schedules()}
    ticked = set(ScheduleTick.objects.values_list("schedule", flat=True).distinct())
    states = {s.name: s for s in ScheduleState.objects.all()}
    rows = []
    for name in sorted(set(declared) | ticked):
        schedule = declared.get(name)
        last = ScheduleTick.objects.filter(schedule=name).order_by("-tick_at").first()
        status = None
        if last is not None and last.job_id is not None:
            status = Job.objects.filter(id=last.job_id).values_list("status", flat=True).first()
        rows.append(
            ScheduleRow(
                name=name,
                schedule=schedule,
                words=schedule.describe() if schedule else "",
                next_run=schedule.next_after(now) if schedule else None,
                last=last,
                last_status=status,
                state=states.get(name),
            )
        )
    return rows
