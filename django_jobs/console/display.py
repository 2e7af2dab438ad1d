"""How the job admin shows a job: ages by the database's clock, JSON values as this viewer may
see them (masked without ``view_sensitive_payload``), and the marks of its external calls in
words, and a durable job's steps with a masked preview of each result."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.html import format_html

from django_jobs import masking
from django_jobs.conf import jobs_settings
from django_jobs.errors import public_class_path
from django_jobs.models import ExternalCall, Job
from django_jobs.reads.durable import StepRecord, steps
from django_jobs.states import JobStatus

#: The job page lists this many marks of external calls, newest first.
CALLS_SHOWN = 50
#: A durable step's result is previewed in this many characters at most.
PREVIEW_CHARS = 120


@dataclass(frozen=True)
class StepShown:
    record: StepRecord
    #: Its result as JSON, masked as this viewer may see it, cut to ``PREVIEW_CHARS``.
    preview: str


def durable_steps(job: Job) -> list[StepShown]:
    """A durable job's steps, sleeps and waits in order (none for another job)."""
    shown = []
    for record in steps(job.id, jobs_settings.DATABASE):
        text = "—" if record.result is None else json.dumps(visible(job, record.result), ensure_ascii=False)
        cut = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
        shown.append(StepShown(record, cut))
    return shown


@dataclass(frozen=True)
class CallShown:
    mark: ExternalCall
    #: Whether it is a mark of the execution running the job now.
    current: bool
    #: What became of the call, in words.
    state: str


def external_calls(job: Job) -> list[CallShown]:
    """The marks of the job's external calls, newest first, each with what became of it."""
    running = job.execution_id if job.status == JobStatus.RUNNING else None
    shown = []
    calls = ExternalCall.objects.using(jobs_settings.DATABASE).filter(job_id=job.id)
    for mark in calls.order_by("-id")[:CALLS_SHOWN]:
        current = mark.execution_id == running
        if mark.ended_at is not None:
            state = f"raised {public_class_path(mark.exception)}" if mark.exception else "returned"
        elif current:
            state = "in progress"
        else:
            state = "no end recorded: its execution was lost during the call"
        shown.append(CallShown(mark, current, state))
    return shown


def read_now(job: Job) -> dt.datetime:
    """The database's clock as read with the row (see ``JobAdmin.get_queryset``)."""
    return getattr(job, "db_now", None) or timezone.now()


def visible(job: Job, value: Any) -> Any:
    """A JSON value of the job as this viewer may see it."""
    if getattr(job, "shows_sensitive", False):
        return value
    return masking.masker_for(job.type).mask(value)


def json_block(value: Any) -> str:
    return format_html("<pre class='djj-json'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


def duration(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
