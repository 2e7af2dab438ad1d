"""What protects external effects from a restored backup: the database's identity as the
workers last saw it (``DatabaseIdentity``, one row) and the holds opened when it changed the way
a restore changes it, or when an operator declared one (``RestoreHold``).

Both are written only by ``django_jobs.transitions.restore``. See docs/operations/restore.md.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Now

from django_jobs.restoring import RestoreKind


class DatabaseIdentity(models.Model):
    """The database as the workers last saw it: one row, rewritten at each worker's look.

    A restore brings this row back as it was at the backup, so what it says is compared with
    what the server says now (``django_jobs.restoring.judge``).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    #: ``pg_control_system()``'s: a cluster's, kept by its base backups and streaming replicas.
    system_identifier = models.BigIntegerField()
    #: A database dropped and re-created (a ``pg_restore`` into it) or copied gets a new one.
    database_oid = models.BigIntegerField()
    #: The server's WAL timeline: a point-in-time recovery or a promoted replica starts a new one.
    timeline = models.PositiveIntegerField()
    #: Raised by one at every look: a worker that saw a generation the row no longer reaches
    #: knows the database lost commits it saw.
    generation = models.PositiveBigIntegerField()
    looked_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = (models.CheckConstraint(condition=Q(id=1), name="django_jobs_identity_one_row"),)

    def __str__(self) -> str:
        return f"database {self.database_oid} of cluster {self.system_identifier}, timeline {self.timeline}"


class RestoreHold(models.Model):
    """A restore detected or declared: while one is open, workers start no job whose effects
    may be outside the database. Rows are never deleted; releasing one records who and why."""

    Kind = RestoreKind

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    #: What was recorded, what the server said and what the worker had seen, in words.
    evidence = models.TextField()
    #: The worker that detected it, or the operator who declared it.
    opened_by = models.CharField(max_length=200)
    opened_at = models.DateTimeField(db_default=Now())
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.CharField(max_length=150, null=True, blank=True)
    release_reason = models.TextField(null=True, blank=True)
    #: What the release did with the jobs the hold kept: how many reconcile first
    #: (``to_reconcile``), were parked (``to_review``), or were left to a running execution.
    settled = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ("-id",)
        permissions = (("release_restore_hold", "Can declare and release restore holds"),)
        constraints = (
            # At most one hold is open at a time: later signs of the same restore add nothing.
            models.UniqueConstraint(
                Value(True), condition=Q(released_at__isnull=True), name="django_jobs_one_open_restore_hold"
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True)
                | Q(released_by__isnull=False, release_reason__isnull=False),
                name="django_jobs_restore_release_says_who_and_why",
            ),
        )

    def __str__(self) -> str:
        state = "open" if self.released_at is None else "released"
        return f"restore hold {self.id} ({self.kind}, {state})"


def open_hold(using: str) -> RestoreHold | None:
    """The restore hold open now on database ``using``, if one is (at most one can be)."""
    return RestoreHold.objects.using(using).filter(released_at__isnull=True).first()
