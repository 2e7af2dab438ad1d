"""The tables of durable jobs (docs/durable-jobs.md): ``JobStep`` (what each position of a
durable job's handler recorded: a step's result, a sleep's wake time, a wait's signal or its
timeout), ``JobSignal`` (signals sent to a job, kept until its wait takes them) and
``SignalKey`` (the key an app chose at enqueue, by which a webhook addresses a job).

Steps are inserted by the execution that ran them, guarded by its ownership of the job; a
wait's record is ended once (its signal taken, or its timeout). Signals are only inserted.
All three go with their job when retention removes it, never before.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from django_jobs.models.jobs import Job


class StepKind(models.TextChoices):
    STEP = "step", "Step"
    SLEEP = "sleep", "Sleep"
    WAIT = "wait", "Wait for a signal"


class JobStep(models.Model):
    """One position of a durable job, as the execution that reached it recorded it."""

    id = models.BigAutoField(primary_key=True)
    # Served by the unique constraint below, whose first column it is: no index of its own.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="durable_steps", db_index=False)
    #: The position in the handler's path: 1 for the first step, sleep or wait it meets.
    sequence = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=StepKind.choices)
    #: A step's result; a wait's signal data once it came (NULL otherwise, and for a sleep).
    result = models.JSONField(null=True, blank=True)
    #: A sleep: when it wakes. A wait: when it times out.
    until = models.DateTimeField(null=True, blank=True)
    #: A wait that ended by its timeout, no signal having come.
    timed_out = models.BooleanField(default=False)
    #: The execution that recorded it.
    execution_id = models.UUIDField()
    created_at = models.DateTimeField(db_default=Now())
    #: A step: when it was recorded. A wait: when its signal was taken or it timed out (NULL
    #: while it waits). A sleep: NULL.
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("job_id", "sequence")
        constraints = (
            models.UniqueConstraint(fields=["job", "sequence"], name="django_jobs_step_position"),
            models.UniqueConstraint(fields=["job", "name"], name="django_jobs_step_name"),
        )
        indexes = (
            # The dashboard's and the metrics' counts of sleeping and waiting jobs: a range of
            # sleeps from now on, and the open waits (few: an ended wait leaves the index).
            models.Index(fields=["until"], condition=models.Q(kind="sleep"), name="django_jobs_step_sleep"),
            models.Index(
                fields=["until"], condition=models.Q(kind="wait", ended_at__isnull=True),
                name="django_jobs_step_open_wait",
            ),
        )  # fmt: skip

    def __str__(self) -> str:
        return f"{self.kind} {self.name} #{self.sequence} job={self.job_id}"


class JobSignal(models.Model):
    """A signal sent to a job by ``django_jobs.signal()``. The first of a name is the one its
    wait takes; a later one of the same name is not stored (``signal()`` returns False)."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="durable_signals", db_index=False)
    name = models.CharField(max_length=100)
    #: The key it was sent to (the job's signal key), for the operator.
    key = models.CharField(max_length=200)
    data = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("job_id", "id")
        constraints = (models.UniqueConstraint(fields=["job", "name"], name="django_jobs_signal_once"),)

    def __str__(self) -> str:
        return f"signal {self.name} job={self.job_id}"


class SignalKey(models.Model):
    """The key an app gave a job at enqueue (``enqueue(..., signal_key="stripe:pi_123")``): a
    key addresses one job, for as long as the job is kept."""

    key = models.CharField(max_length=200, primary_key=True)
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="signal_key")
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.key} → job {self.job_id}"
