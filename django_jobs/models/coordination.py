"""The tables workers coordinate through: paused queues (``Queue``), the locks of concurrency
keys (``ConcurrencyKey``), the starts of rate windows (``RateWindow``), the once-only ticks of
schedules and their disabled state (``ScheduleTick``, ``ScheduleState``), and the workers alive
(``LiveWorker``).

Each is written by the SQL of ``django_jobs.transitions`` (or of the claim's functions in the
migrations), never through these models.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from django_jobs.conf import jobs_settings
from django_jobs.names import QUEUE_PATTERN


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
