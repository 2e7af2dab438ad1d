"""Over 300 lines: the job table's columns and its indexes, each documented where it is defined;
apart, an index would be read away from the others the planner weighs it against.

The job table: ``Job``, one row per job with the happy path recorded on it, and its named
reads (``Job.objects``: pending, running, stale, claimable, ...).

Status writes do not go through this model: ``django_jobs.transitions`` is their only writer.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections, models
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from django_jobs.registry import registry
from django_jobs.states import ACTIVE_STATUSES, KEY_HOLDING_STATUSES, JobStatus
from django_jobs.transitions.claimable import CLAIM_ORDER, claim_filter, claim_inputs, positional


class JobQuerySet(models.QuerySet["Job"]):
    """Named reads. Each one is served by one of the partial indexes on ``Job``."""

    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def failed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def stale(self) -> JobQuerySet:
        """Running jobs whose lease expired: their worker is presumed lost (the reaper's prey)."""
        return self.filter(status=JobStatus.RUNNING, lease_expires_at__lt=Now())

    def claimable(
        self, queues: Iterable[str] | None = None, types: Iterable[str] | None = None
    ) -> JobQuerySet:
        """The jobs a worker of this process could claim now, in the order it would claim them.

        The claim's own conditions, from the same SQL text (``transitions.claimable``): pending,
        due by the database's clock, of a type this process has a handler for (among ``types``,
        when given) and a payload version it can read, in a queue that is not paused (among
        ``queues``, when given), with room under its concurrency key and rate limit as the
        claim's candidate scan sees them; best priority first, then the longest due. Raises
        nothing for names nobody knows: they match no job.
        """
        inputs = claim_inputs(registry.among(types))
        if not inputs.versions:
            return self.none()
        sql, params = positional(*claim_filter(inputs))
        claimable = self.filter(RawSQL(sql, params, output_field=BooleanField()))
        if queues is not None:
            claimable = claimable.filter(queue__in=list(queues))
        return claimable.order_by(*CLAIM_ORDER)

    def distinct_values(self, column: str) -> list[str]:
        """The distinct non-null values of an indexed column, by a loose index scan.

        ``SELECT DISTINCT`` would read every row; this jumps from one value to the next through
        the column's index, so it costs one index probe per distinct value on any table size.
        """
        if column not in _DISTINCT_COLUMNS:
            raise ValueError(f"no index serves distinct values of {column!r}")
        # "IS NOT NULL" lets a partial index (WHERE column IS NOT NULL) serve the probes.
        sql = (
            f"WITH RECURSIVE v AS ("
            f" SELECT min({column}) AS value FROM django_jobs_job WHERE {column} IS NOT NULL"
            f" UNION ALL SELECT (SELECT min({column}) FROM django_jobs_job WHERE {column} > v.value)"
            " FROM v WHERE v.value IS NOT NULL) SELECT value FROM v WHERE value IS NOT NULL"
        )
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql)
            return [row[0] for row in cursor.fetchall()]


# The conditions of the claim's partial indexes, with their terms in the order migration 0013
# wrote them: ``Q(status=..., ready=...)`` sorts its keywords, and a different order is a change
# of state to ``makemigrations``, although PostgreSQL's index is the same.
_READY = Q(("status", JobStatus.PENDING), ("ready", True))
_LATER = Q(("status", JobStatus.PENDING), ("ready", False))

_DISTINCT_COLUMNS = frozenset({"queue", "type", "last_error_code"})


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100)
    type = models.CharField(max_length=200, help_text="Stable name the handler is registered under.")
    version = models.PositiveIntegerField(default=1, help_text="Version of the payload's schema.")
    payload = models.JSONField()
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    priority = models.SmallIntegerField(default=0, help_text="Higher runs first (-100 … 100).")
    available_at = models.DateTimeField(db_default=Now(), help_text="Not claimed before this.")
    #: Whether the job was due when it became pending: a job scheduled for later is written not
    #: ready (by a trigger on insert, migration 0013, and by the transitions that send a job
    #: back to pending), and stays out of the claim indexes until a claim promotes it once it
    #: is due (``transitions.execution``). It decides what the claims read, never what they
    #: may take: a ready job is still not claimed before its ``available_at``, and a due one
    #: not ready is promoted by the next claim of its kind.
    ready = models.BooleanField(db_default=True, editable=False)
    attempts = models.PositiveIntegerField(default=0, help_text="Executions started so far.")
    max_attempts = models.PositiveIntegerField(default=5)
    unique_key = models.CharField(
        max_length=200,
        null=True,
        blank=True,
        help_text="At most one pending, running or parked job of this type holds a given key.",
    )
    #: The type's policy for an execution that may have done its effect (retry, reconcile,
    #: needs_review), copied at enqueue: whichever process recovers the job decides by it,
    #: even one that does not know the type.
    on_lost = models.CharField(max_length=20, db_default="retry")
    #: Jobs of one type sharing a concurrency key run at most ``concurrency_limit`` at once
    #: (the type's limit, copied at enqueue like ``on_lost``); NULL for a job without a key.
    concurrency_key = models.CharField(max_length=200, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    #: For a type that marks its external calls (``@job(external_calls=...)``), copied at
    #: enqueue like ``on_lost``: where a job goes when an execution that marked a call is lost
    #: ("reconcile" or "needs_review"); one lost before any mark is retried. NULL for a type
    #: that does not mark its calls: ``on_lost`` decides.
    on_lost_in_call = models.CharField(max_length=20, null=True, blank=True)
    #: The start-by deadline (``enqueue(start_by=…/expires_in=…)``): a job not started by then
    #: never starts; it ends ``cancelled`` with code ``EXPIRED`` (the worker's start path or
    #: the reaper's pass). NULL for most jobs: no deadline.
    start_by = models.DateTimeField(null=True, blank=True, help_text="Never started after this.")
    #: The key of a debounced enqueue (``enqueue(debounce=…, debounce_key=…)``): a later
    #: enqueue with the same type and key updates this job while it is pending and never
    #: started, instead of making another. NULL for most jobs.
    debounce_key = models.CharField(max_length=200, null=True, blank=True)

    # Ownership of the current (or last) execution. Every write after a claim is guarded by
    # (id, execution_id, status='running'), so an execution that lost its lease changes nothing.
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    execution_id = models.UUIDField(null=True, blank=True)
    #: When the current (or last) execution started. NULL on a running job that was prefetched
    #: and has not begun yet: its attempt is counted only once it starts.
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the last execution started.")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the execution."
    )
    #: The reaper may take the job from its execution after this; each heartbeat pushes it back.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    last_error_code = models.CharField(max_length=100, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True, help_text="Sanitized: secrets are redacted.")
    progress = models.JSONField(null=True, blank=True)
    #: What the handler returned (plain JSON within MAX_RESULT_BYTES), written with the
    #: completion; NULL while the job has not completed, or when the handler returned None.
    return_value = models.JSONField(null=True, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)

    # Manual retries by operators; each one is also a JobEvent with who and why.
    manual_retries = models.PositiveIntegerField(db_default=0)
    retried_by = models.CharField(max_length=150, null=True, blank=True)
    retried_at = models.DateTimeField(null=True, blank=True)

    #: The workflow this job is a member of (``django_jobs.workflows``); NULL for most jobs. A
    #: plain column, not a foreign key: a key's check would cost every enqueue a trigger.
    workflow_id = models.BigIntegerField(null=True, blank=True, editable=False)
    #: The W3C trace context (``traceparent``, ``tracestate``, ``baggage``) of the span that
    #: enqueued the job, or of an operator's retry: each execution's span is its child. NULL
    #: unless the enqueuing process traced (``observe.tracing``).
    trace_context = models.JSONField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    #: When the job reached a finished status (completed, failed, skipped, cancelled); retention
    #: prunes by it.
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ("-id",)
        permissions = (
            ("retry_job", "Can retry failed, cancelled and parked jobs"),
            ("cancel_job", "Can cancel pending and running jobs"),
            ("resolve_job", "Can resolve jobs that need review"),
            ("view_sensitive_payload", "Can see the sensitive fields of payloads unmasked"),
            ("signal_job", "Can send signals to durable jobs and wake sleeping ones"),
        )
        indexes = (
            # The claim of a worker that serves named queues: for each queue and each kind of job
            # it runs (a type and a payload version it reads), one ordered scan that starts at the
            # first claimable row. Only pending jobs that were due when written are in it: jobs
            # scheduled for later, of types this worker does not run or of versions it cannot
            # read are never walked, however many there are.
            models.Index(
                "queue",
                "type",
                "version",
                models.F("priority").desc(),
                "available_at",
                "id",
                name="django_jobs_ready_queue",
                condition=_READY,
            ),
            # The claim of a worker that serves every queue: one ordered scan per kind.
            models.Index(
                "type",
                "version",
                models.F("priority").desc(),
                "available_at",
                "id",
                name="django_jobs_ready",
                condition=_READY,
            ),
            # Jobs scheduled for later, by kind and due time: each claim promotes the due ones of
            # its kinds from here (a probe per kind when none is due), and an idle worker reads
            # when its next one is due.
            models.Index(
                "type",
                "version",
                "available_at",
                name="django_jobs_later",
                condition=_LATER,
            ),
            # The reaper's search for expired leases, and the list of what is running.
            models.Index(
                fields=["lease_expires_at"],
                name="django_jobs_running",
                condition=Q(status=JobStatus.RUNNING),
            ),
            # Retention, throughput and processing times; only finished rows are in it, and the
            # columns the dashboard aggregates ride along so its reads never touch the table.
            models.Index(
                fields=["status", "finished_at"],
                name="django_jobs_finished",
                condition=Q(finished_at__isnull=False),
                include=["type", "started_at"],
            ),
            # What needs a human: the dashboard counts it per queue and per error code from here.
            models.Index(
                fields=["status", "finished_at", "queue", "last_error_code"],
                name="django_jobs_problems",
                condition=Q(status__in=[JobStatus.FAILED, JobStatus.NEEDS_REVIEW]),
            ),
            # The operator console: each list filter reads the newest rows first through one
            # of these, on a table of millions.
            models.Index(fields=["status", "-id"], name="django_jobs_status"),
            models.Index(fields=["type", "-id"], name="django_jobs_type"),
            models.Index(fields=["queue", "-id"], name="django_jobs_queue"),
            models.Index(
                fields=["last_error_code", "-id"],
                name="django_jobs_error_code",
                condition=Q(last_error_code__isnull=False),
            ),
            models.Index(
                fields=["unique_key"], name="django_jobs_unique_key", condition=Q(unique_key__isnull=False)
            ),
            # A workflow's members, for its page and the results its callbacks read.
            models.Index(
                fields=["workflow_id", "id"],
                name="django_jobs_workflow_members",
                condition=Q(workflow_id__isnull=False),
                include=["status"],
            ),
            # The members of a workflow that have not ended (or await review): whether the
            # workflow still runs, read by retention before it prunes a member.
            models.Index(
                fields=["workflow_id"],
                name="django_jobs_workflow_live",
                condition=Q(workflow_id__isnull=False, status__in=sorted(KEY_HOLDING_STATUSES)),
            ),
            # The dashboard's and the metrics view's counts per queue: a loose scan of it finds
            # the queues, and each count is a range of it stopped at a cap, whatever the backlog
            # or the failed jobs kept (migration 0023). Not the running jobs: their heartbeats
            # would write an entry each.
            models.Index(
                fields=["queue", "status", "available_at"],
                name="django_jobs_queue_counts",
                condition=Q(status__in=["failed", "needs_review", "pending", "waiting"]),
            ),
            # The reaper's pass ends the pending jobs past their start-by deadline from here;
            # only jobs with a deadline are in it.
            models.Index(
                fields=["start_by"],
                name="django_jobs_start_by",
                condition=Q(("status", JobStatus.PENDING), ("start_by__isnull", False)),
            ),
            # A debounced enqueue finds the pending job of its key from here.
            models.Index(
                fields=["type", "debounce_key"],
                name="django_jobs_debounce_key",
                condition=Q(("status", JobStatus.PENDING), ("debounce_key__isnull", False)),
            ),
            # The claim counts the running jobs of each concurrency key it starts jobs of.
            models.Index(
                fields=["type", "concurrency_key"],
                name="django_jobs_key_running",
                condition=Q(status=JobStatus.RUNNING, concurrency_key__isnull=False),
            ),
        )
        constraints = (
            models.UniqueConstraint(
                fields=["type", "unique_key"],
                name="django_jobs_unique_key_kept",
                condition=Q(status__in=sorted(KEY_HOLDING_STATUSES), unique_key__isnull=False),
            ),
            # The backstop of a concurrency limit of 1: the claim never starts a second job of a
            # key (see ConcurrencyKey); were it ever to, the database would refuse it.
            models.UniqueConstraint(
                fields=["type", "concurrency_key"],
                name="django_jobs_key_running_once",
                condition=Q(status=JobStatus.RUNNING, concurrency_limit=1, concurrency_key__isnull=False),
            ),
            models.CheckConstraint(condition=Q(status__in=JobStatus.values), name="django_jobs_status_valid"),
            models.CheckConstraint(
                condition=Q(priority__gte=-100, priority__lte=100), name="django_jobs_priority_range"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="django_jobs_max_attempts_positive"
            ),
            # A running job always has an owner: the reaper and every guarded write rely on it.
            models.CheckConstraint(
                condition=~Q(status=JobStatus.RUNNING)
                | Q(execution_id__isnull=False, heartbeat_at__isnull=False, lease_expires_at__isnull=False),
                name="django_jobs_running_has_owner",
            ),
        )

    def __str__(self) -> str:
        return f"{self.type} #{self.id} ({self.status})"
