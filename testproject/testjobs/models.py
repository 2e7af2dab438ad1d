from __future__ import annotations

from django.db import models


class BusinessRow(models.Model):
    """One business effect per key: tests count these to prove an effect happened once."""

    key = models.CharField(max_length=200, unique=True)
    job_id = models.BigIntegerField()
    execution_id = models.UUIDField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key


class EffectLog(models.Model):
    """A business effect with no constraint of its own: only the job's idempotency keeps it single."""

    key = models.CharField(max_length=200)
    execution_id = models.UUIDField()

    def __str__(self) -> str:
        return self.key


class KeyedRun(models.Model):
    """When one execution of a job with a concurrency key ran: tests count the overlaps per key."""

    key = models.CharField(max_length=200)
    job_id = models.BigIntegerField()
    started = models.FloatField()  # time.time() of the worker process, all on one host
    finished = models.FloatField()

    def __str__(self) -> str:
        return f"{self.key} #{self.job_id}"
