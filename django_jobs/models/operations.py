"""The tables of an operator's action on every job a filter matches (``django_jobs.bulk``):
``BulkOperation`` (who, why, which filter, how it went) and ``BulkOperationJob`` (the jobs it
was started on, each with the state it was seen in and what became of it).

The jobs are taken when the operation starts, each with its status, execution and manual
retries as they were then: the operation acts on a job only if all three are unchanged (a job
retried by someone else, or run again, since then is skipped, not forced). Nothing here is
deleted with the jobs: the operation is the audit record of what was done to them.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class BulkAction(models.TextChoices):
    RETRY = "retry", "Retry"
    CANCEL = "cancel", "Cancel"


class BulkState(models.TextChoices):
    RUNNING = "running", "Running"  # its job works through the jobs, a batch at a time
    DONE = "done", "Done"  # every job was acted on or skipped
    CANCELLED = "cancelled", "Cancelled"  # an operator stopped it; the jobs after are untouched


class BulkOperation(models.Model):
    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=10, choices=BulkAction.choices)
    state = models.CharField(max_length=10, choices=BulkState.choices, default=BulkState.RUNNING)
    #: The filter as given (``JobFilter.as_dict``), kept as the record of what was asked.
    filter = models.JSONField()
    actor = models.CharField(max_length=150)
    reason = models.TextField()
    #: Jobs per second the operation moves at most.
    pace = models.PositiveIntegerField()
    #: The jobs taken at the start (the ``BulkOperationJob`` rows), and what became of them.
    total = models.PositiveIntegerField()
    done = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    #: The highest job id dealt with: the next batch starts after it, also after a crash.
    last_job_id = models.BigIntegerField(default=0)
    #: The job that carries it out (a job of type ``django_jobs.bulk``).
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    #: Who stopped it and why, if someone did.
    cancelled_by = models.CharField(max_length=150, blank=True, default="")
    cancel_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ("-id",)
        constraints = (
            models.CheckConstraint(
                condition=Q(done__lte=models.F("total") - models.F("skipped")),
                name="django_jobs_bulk_counts_add_up",
            ),
        )

    def __str__(self) -> str:
        return f"{self.get_action_display()} of {self.total} matching jobs (operation #{self.id})"

    @property
    def left(self) -> int:
        return self.total - self.done - self.skipped


class BulkOutcome(models.TextChoices):
    DONE = "done", "Done"
    #: Its status or execution changed after the operation started: left as it was.
    CHANGED = "changed", "Skipped: it changed since"
    #: Retry only: another live job of its type holds its unique key.
    KEY_HELD = "key_held", "Skipped: another live job holds its unique key"
    #: It no longer exists (retention pruned it).
    GONE = "gone", "Skipped: it no longer exists"
    #: Retry only: a rule of its workflow refused it (the job's ``detail`` says which).
    REFUSED = "refused", "Skipped: its workflow refused it"


class BulkOperationJob(models.Model):
    """One job an operation was started on. Unique by (operation, job): the batches walk that
    index in job id order from the operation's cursor."""

    id = models.BigAutoField(primary_key=True)
    operation = models.ForeignKey(
        BulkOperation, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )
    job_id = models.BigIntegerField()
    seen_status = models.CharField(max_length=20)
    seen_execution = models.UUIDField(null=True, blank=True)
    #: An operator's retry starts a job's attempts afresh, with no execution: a job retried by
    #: someone else since is told apart by this count.
    seen_manual_retries = models.PositiveIntegerField(default=0)
    outcome = models.CharField(max_length=10, choices=BulkOutcome.choices, null=True, blank=True)
    #: Why it was skipped, as the refusal said it ("job 9 (pending) holds its unique key 'k'").
    detail = models.TextField(null=True, blank=True)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["operation", "job_id"], name="django_jobs_bulk_job_once"),
        )

    def __str__(self) -> str:
        return f"job {self.job_id} of operation #{self.operation_id}"
