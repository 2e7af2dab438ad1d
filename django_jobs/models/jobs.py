"""The job tables: ``Job`` (one row per job, the happy path recorded on it), ``JobEvent``
(append-only history of every transition off the plain claim → complete path, and of every
manual action), ``ExternalCall`` (the marks executions commit before calling out) and
``ProcessedEffect`` (keys of side effects that already happened).

Status writes do not go through these models: ``transitions.py`` is their only writer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db import connections, models
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from django_jobs.conf import jobs_settings
from django_jobs.registry import QUEUE_PATTERN
from django_jobs.states import ACTIVE_STATUSES, KEY_HOLDING_STATUSES, EventKind, JobStatus
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
        inputs = claim_inputs(types)
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
        )
        indexes = (
            # The claim of a worker that serves named queues: one ordered index scan per queue,
            # whatever the number of finished rows (they are not in the index). `version` comes
            # last: it orders nothing, but the claim's `version <= newest` is checked on the
            # index entry, so a backlog of payloads too new for a worker costs it no row reads.
            models.Index(
                "queue",
                models.F("priority").desc(),
                "available_at",
                "id",
                "version",
                name="django_jobs_claim_queue",
                condition=Q(status=JobStatus.PENDING),
            ),
            # The claim of a worker that serves every queue.
            models.Index(
                models.F("priority").desc(),
                "available_at",
                "id",
                "version",
                name="django_jobs_claim_any",
                condition=Q(status=JobStatus.PENDING),
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
                name="django_jobs_unique_key_held",
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


class ConcurrencyKey(models.Model):
    """The lock that serializes the claims of one concurrency key of a job type.

    A claim locks a key's row (creating it first if needed) before it counts the key's running
    jobs and starts some (see ``django_jobs_admit_keys`` in migration 0007). The row holds no
    count: the count comes from the job table, so the reaper may delete rows freely.
    """

    type = models.CharField(max_length=200)
    key = models.CharField(max_length=200)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["type", "key"], name="django_jobs_concurrency_key_unique"),
        )

    def __str__(self) -> str:
        return f"{self.type} {self.key}"


class TimestampArray(models.Field):  # type: ignore[type-arg]  # generic only in the stubs
    """A ``timestamptz[]`` column, written and read by the claim's SQL functions.

    Not ``django.contrib.postgres``'s ArrayField: that one requires the postgres app in
    ``INSTALLED_APPS`` (Django 6 checks it), which a job system has no business asking for.
    """

    description = "An array of timestamps"

    def db_type(self, connection: Any) -> str:
        return "timestamp with time zone[]"


class RateWindow(models.Model):
    """The starts of a rate-limited job type within its window, across all workers.

    One timestamp per start, oldest first; starts older than the window are dropped whenever
    the claim writes the row. The claim locks the row to take starts from it, so concurrent
    claims never exceed the limit together (see ``django_jobs_admit_starts`` in migration 0007).
    """

    type = models.CharField(max_length=200, primary_key=True)
    starts = TimestampArray(default=list)

    def __str__(self) -> str:
        return f"{self.type}: {len(self.starts)} recent start(s)"


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


#: A worker that has not reported for more than this many heartbeat intervals is silent: it
#: was killed, froze or lost the database. The dashboard, diagnoses and ``checkjobs`` agree on it.
SILENT_AFTER_BEATS = 3


def silence_threshold() -> float:
    """Seconds without a report after which a worker counts as silent, not alive."""
    return SILENT_AFTER_BEATS * jobs_settings.HEARTBEAT_INTERVAL


class LiveWorker(models.Model):
    """A ``runjobs`` process, as it last reported itself (every heartbeat interval).

    Rows of workers that stopped cleanly are removed on exit; a row whose ``last_seen_at`` is
    old belongs to a worker that died or froze.
    """

    worker_id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.CharField(max_length=500, help_text="Served queues; empty means all.")
    concurrency = models.PositiveIntegerField()
    running = models.PositiveIntegerField(default=0, help_text="Jobs held at the last report.")
    processed = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    #: The job types this worker's code runs, each with the newest payload version it reads:
    #: ``{"documents.process": 2}``. Written once, with the worker's first report; NULL for a
    #: worker that has not said (one of an older release): it may know any type.
    job_types = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ("worker_id",)

    def __str__(self) -> str:
        return self.worker_id

    def silent_seconds(self, now: dt.datetime) -> float:
        """Seconds since its last report, by the database's clock ``now``."""
        return max(0.0, (now - self.last_seen_at).total_seconds())

    def is_alive(self, now: dt.datetime) -> bool:
        return self.silent_seconds(now) <= silence_threshold()

    def serves(self, queue: str) -> bool:
        """Whether it claims from ``queue`` (a worker given no queue serves them all)."""
        return not self.queues or queue in self.queues.split(",")

    def reads(self, job_type: str) -> int | None:
        """The newest payload version of ``job_type`` it reads; None if it does not run the type.
        A worker that did not say what it runs may run anything: any version."""
        if self.job_types is None:
            return 2**31 - 1
        version = self.job_types.get(job_type) if isinstance(self.job_types, dict) else None
        return version if isinstance(version, int) else None


class Queue(models.Model):
    """A queue an operator paused (and perhaps resumed since): the claim skips the jobs of a
    queue whose ``paused_at`` is set. A queue that was never paused has no row.

    Written only by ``transitions.queues``; each pause and resume is also a ``QueueEvent``.
    """

    name = models.CharField(max_length=100, primary_key=True)
    #: Set while the queue is paused; NULL once it is resumed.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, null=True, blank=True)
    reason = models.TextField(null=True, blank=True, help_text="Why it was paused.")

    class Meta:
        # "django_jobs_queue" is the name of an index on the job table.
        db_table = "django_jobs_queue_state"
        ordering = ("name",)
        permissions = (("pause_queue", "Can pause and resume queues"),)
        constraints = (
            # Pause notifications carry the name after a marker no queue name can start with.
            models.CheckConstraint(
                condition=Q(name__regex=QUEUE_PATTERN), name="django_jobs_queue_name_valid"
            ),
            models.CheckConstraint(
                condition=Q(paused_at__isnull=True) | Q(paused_by__isnull=False, reason__isnull=False),
                name="django_jobs_queue_pause_says_who_and_why",
            ),
        )

    def __str__(self) -> str:
        return f"queue {self.name} ({'paused' if self.paused_at else 'running'})"


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


class ScheduleTick(models.Model):
    """One tick of a schedule and what it did: the audit of periodic jobs.

    The unique (schedule, tick_at) is what makes a tick fire once however many workers run: each
    inserts the row with ``ON CONFLICT DO NOTHING``, and only the one whose insert succeeded
    enqueues the job, in the same transaction. Written only by ``transitions.schedules``; pruned
    by ``SCHEDULE_TICK_RETENTION``, except the latest tick of each schedule.
    """

    class Outcome(models.TextChoices):
        ENQUEUED = "enqueued", "Enqueued"
        #: The previous tick's job was still pending or running (``on_running="skip"``).
        SKIPPED = "skipped", "Skipped: previous run still active"
        #: Found due later than the schedule's ``misfire_grace``: not run.
        MISSED = "missed", "Missed: too late to run"
        #: The schedule was disabled by an operator.
        DISABLED = "disabled", "Disabled"

    id = models.BigAutoField(primary_key=True)
    schedule = models.CharField(max_length=200)
    tick_at = models.DateTimeField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    #: Ticks before this one that nobody fired (all workers were down), coalesced into it.
    coalesced = models.IntegerField(default=0)
    #: The job this tick enqueued (or found still active); a plain column, so pruning jobs
    #: keeps the tick's record.
    job_id = models.BigIntegerField(null=True, blank=True)
    worker_id = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ("schedule", "-tick_at")
        constraints = (
            models.UniqueConstraint(fields=["schedule", "tick_at"], name="django_jobs_schedule_tick_once"),
        )

    def __str__(self) -> str:
        return f"{self.schedule} @ {self.tick_at.isoformat()}: {self.outcome}"


class ScheduleState(models.Model):
    """A schedule an operator disabled (and perhaps enabled since): its ticks are recorded as
    ``disabled`` and enqueue nothing. A schedule that was never disabled has no row.

    Written only by ``transitions.schedules``; each change is also a ``ScheduleEvent``.
    """

    name = models.CharField(max_length=200, primary_key=True)
    #: Set while the schedule is disabled; NULL once it is enabled again.
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_by = models.CharField(max_length=150, null=True, blank=True)
    reason = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ("name",)
        permissions = (("manage_schedule", "Can disable, enable and run schedules now"),)

    def __str__(self) -> str:
        return f"schedule {self.name} ({'disabled' if self.disabled_at else 'enabled'})"


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
