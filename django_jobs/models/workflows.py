"""The tables of workflows: ``Workflow`` (one per ``enqueue_chain`` or ``enqueue_group`` call),
``WorkflowStep`` (each member job's place in it) and ``Barrier`` (a count of the jobs a step
waits for that have not ended yet).

A member job feeds at most one barrier; any number of steps wait on one. A barrier of more than
``workflow_plan.LEAF_SIZE`` jobs is a tree: leaves of that many jobs, and a parent that counts
its leaves, so that 100,000 jobs ending at once on several workers update 1,563 rows, not one.
Triggers keep the counts (migration 0020, ``transitions.workflow_triggers``): whatever ends a member job
(a worker's outcome, the reaper, an operator) counts it in the same transaction, and the count
that reaches zero makes the steps waiting on it due, once. These models only read.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class WorkflowKind(models.TextChoices):
    CHAIN = "chain", "Chain"
    GROUP = "group", "Group"


class StepRole(models.TextChoices):
    """What a member job is to its workflow."""

    STEP = "step", "Step"  # a step of a chain, or a member of a group
    ON_SUCCESS = "on_success", "On success"
    ON_FAILURE = "on_failure", "On failure"
    ON_COMPLETE = "on_complete", "On complete"


class RunsIf(models.TextChoices):
    """When a waiting step runs, once every job it waits for ended."""

    SUCCEEDED = "succeeded", "They all completed (or skipped)"
    FAILED = "failed", "At least one failed or was cancelled"
    ENDED = "ended", "They ended, however"


class Workflow(models.Model):
    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=10, choices=WorkflowKind.choices)
    #: The caller's name for it, shown by the console (may repeat).
    name = models.CharField(max_length=200, blank=True, default="")
    #: Member jobs, callbacks included.
    size = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        label = f" {self.name}" if self.name else ""
        return f"{self.kind} #{self.id}{label} ({self.size} jobs)"


class Barrier(models.Model):
    """What waiting steps wait for: the jobs that feed it, ``remaining`` of them not ended.

    ``failed`` counts those that ended failed or cancelled. A leaf of a tree (``parent`` set)
    counts its jobs; the parent counts its leaves: ``remaining`` leaves with a job not ended,
    ``failed`` ended leaves with a failure.
    """

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="barriers", db_index=False)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="leaves")
    #: How many jobs (or leaves) feed it.
    size = models.PositiveIntegerField()
    remaining = models.IntegerField()
    failed = models.IntegerField(default=0)

    class Meta:
        indexes = (models.Index(fields=["workflow", "id"], name="django_jobs_barrier_workflow"),)
        constraints = (
            models.CheckConstraint(
                condition=Q(remaining__gte=0, failed__gte=0), name="django_jobs_barrier_counts"
            ),
        )

    def __str__(self) -> str:
        return f"barrier #{self.id}: {self.remaining} of {self.size} left"


class WorkflowStep(models.Model):
    """A member job's place in its workflow (the job itself carries ``workflow_id``)."""

    job = models.OneToOneField(
        "django_jobs.Job", primary_key=True, on_delete=models.CASCADE, related_name="step"
    )
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps", db_index=False)
    #: Its place in the workflow as it was written (0 first), for the drawing.
    position = models.PositiveIntegerField()
    #: Its place in a chain (0 first); members of one group share their chain position.
    stage = models.PositiveIntegerField()
    role = models.CharField(max_length=12, choices=StepRole.choices, default=StepRole.STEP)
    #: The barrier this job's end is counted in; NULL for a job nothing waits for.
    feeds = models.ForeignKey(Barrier, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    #: The barrier this job waits for; NULL for a job born pending.
    waits_on = models.ForeignKey(Barrier, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    runs_if = models.CharField(max_length=10, choices=RunsIf.choices, default=RunsIf.SUCCEEDED)
    #: Seconds between becoming due and being claimable.
    delay = models.FloatField(default=0.0)
    #: Set when its workflow cancelled it (a job it waited for failed): an operator's retry of
    #: that job makes it wait again. A step an operator cancelled is never resumed.
    stopped = models.BooleanField(default=False)

    class Meta:
        ordering = ("workflow_id", "position")
        indexes = (
            models.Index(fields=["workflow", "position"], name="django_jobs_step_workflow"),
            models.Index(
                fields=["waits_on"], name="django_jobs_step_waits_on", condition=Q(waits_on__isnull=False)
            ),
            models.Index(
                fields=["feeds", "job"], name="django_jobs_step_feeds", condition=Q(feeds__isnull=False)
            ),
        )

    def __str__(self) -> str:
        return f"step {self.position} of workflow #{self.workflow_id}: job #{self.job_id}"
