"""What happened, kept: ``JobEvent`` (every transition off the plain claim → complete path, and
every manual action), ``QueueEvent`` and ``ScheduleEvent`` (operators' pauses, disables and
runs), ``ExternalCall`` (the marks executions commit before calling out), ``ProcessedEffect``
(keys of side effects that already happened) and ``PendingLogEntry`` (admin log entries owed).

Rows here are only ever inserted (an external call is also ended once, a pending log entry
deleted once its entry exists).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Now

from django_jobs.models.jobs import Job
from django_jobs.states import EventKind, JobStatus


class JobEvent(models.Model):
    """One transition or manual action on a job. Rows are only ever inserted."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=30, choices=EventKind.choices)
    from_status = models.CharField(max_length=20, choices=JobStatus.choices, null=True, blank=True)
    to_status = models.CharField(max_length=20, choices=JobStatus.choices, null=True, blank=True)
    execution_id = models.UUIDField(null=True, blank=True)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=100, null=True, blank=True)
    error = models.TextField(null=True, blank=True, help_text="Sanitized: secrets are redacted.")
    #: Who acted: a username for manual actions, "worker" / "reaper" for the system.
    actor = models.CharField(max_length=150, null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    details = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("job_id", "id")
        indexes = (
            models.Index(fields=["job", "id"], name="django_jobs_event_job"),
            # The dashboard's retry rate and recent activity.
            models.Index(fields=["kind", "created_at"], name="django_jobs_event_kind"),
        )

    def __str__(self) -> str:
        return f"{self.kind} job={self.job_id} {self.from_status}→{self.to_status}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ValueError("JobEvent rows are append-only")
        super().save(*args, **kwargs)


class ExternalCall(models.Model):
    """A mark an execution committed before calling out of the system (``ctx.external_call``).

    Inserted before the call, by a write guarded like every write of an execution; its end
    (``ended_at``, and the exception that left the block, if any) is written when the block
    exits. When an execution is lost, the reaper looks for its marks: none means it never
    reached the provider (a plain retry is safe); one means it may have (the job is reconciled,
    or parked for review). Rows are only inserted, and ended once.
    """

    id = models.BigAutoField(primary_key=True)
    # Served by the index below, whose first column it is: no index of its own.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="external_calls", db_index=False)
    execution_id = models.UUIDField()
    name = models.CharField(max_length=100)
    started_at = models.DateTimeField(db_default=Now())
    #: When the block exited; NULL while the call runs, or if its execution died in it.
    ended_at = models.DateTimeField(null=True, blank=True)
    #: The import path of the exception that left the block (never its message: no secrets).
    exception = models.CharField(max_length=300, null=True, blank=True)

    class Meta:
        ordering = ("job_id", "id")
        indexes = (
            # The reaper's question (did this execution mark a call?) and the job's page.
            models.Index(fields=["job", "execution_id"], name="django_jobs_call_execution"),
        )

    def __str__(self) -> str:
        return f"call {self.name} job={self.job_id} execution={self.execution_id}"


class ProcessedEffect(models.Model):
    """A side effect that already happened, keyed by a stable business key.

    The key is inserted in the same transaction as the effect itself, so both commit or roll
    back together; a second execution finds the key and skips the effect.
    """

    key = models.CharField(max_length=300, primary_key=True)
    #: The job that produced the effect; a plain column, so pruning jobs keeps the effect.
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.key


class QueueEvent(models.Model):
    """One pause or resume of a queue, with who and why. Rows are only ever inserted."""

    class Kind(models.TextChoices):
        PAUSED = "paused", "Paused"
        RESUMED = "resumed", "Resumed"

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    actor = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("queue", "id")
        indexes = (models.Index(fields=["queue", "id"], name="django_jobs_queue_event"),)

    def __str__(self) -> str:
        return f"{self.kind} queue={self.queue} by {self.actor}"


class ScheduleEvent(models.Model):
    """One disable, enable or run-now of a schedule, with who and why. Only ever inserted."""

    class Kind(models.TextChoices):
        DISABLED = "disabled", "Disabled"
        ENABLED = "enabled", "Enabled"
        RUN_NOW = "run_now", "Run now"

    id = models.BigAutoField(primary_key=True)
    schedule = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    actor = models.CharField(max_length=150)
    reason = models.TextField()
    #: The job a run-now enqueued.
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("schedule", "id")
        indexes = (models.Index(fields=["schedule", "id"], name="django_jobs_schedule_event"),)

    def __str__(self) -> str:
        return f"{self.kind} schedule={self.schedule} by {self.actor}"


class PendingLogEntry(models.Model):
    """A Django admin ``LogEntry`` owed for a console action, kept on the jobs database.

    When ``LogEntry`` lives on another database than the job tables, the two cannot commit in
    one transaction. The action's event (``JobEvent``, ``QueueEvent``, ``ScheduleEvent``) is the
    record of truth; this row commits with it, and is turned into the ``LogEntry`` once that
    has committed (see ``django_jobs.console.audit``). A row is deleted only once its entry exists.
    """

    id = models.BigAutoField(primary_key=True)
    #: The jobs database's clock at the action: the entry's ``action_time``.
    action_time = models.DateTimeField(db_default=Now())
    #: The acting user's primary key, as text (the user table is on the log's database).
    user_id = models.CharField(max_length=255)
    content_type_id = models.IntegerField()
    object_id = models.TextField()
    object_repr = models.CharField(max_length=200)
    action_flag = models.PositiveSmallIntegerField()
    change_message = models.TextField()

    class Meta:
        ordering = ("id",)

    def __str__(self) -> str:
        return f"log entry owed for {self.object_repr}: {self.change_message}"
