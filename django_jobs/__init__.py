"""Background jobs for Django on PostgreSQL: a job may run more than once, but its business
effect happens once, and the system can always say where every job is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_jobs.backoff import Backoff
from django_jobs.effects import compare_and_set, once
from django_jobs.errors import (
    DeadlineExceeded,
    EnqueueError,
    ErrorCode,
    InvalidCheckpoint,
    InvalidOption,
    InvalidPayload,
    InvalidProgress,
    JobCancelled,
    JobNotFound,
    PayloadTooLarge,
    PermanentError,
    RateLimitedError,
    RetryableError,
    SkipJob,
    UnknownJobType,
    UnknownQueue,
)
from django_jobs.registry import Reconciliation, job
from django_jobs.runtime.context import JobContext, LeaseLost
from django_jobs.transitions import ActionRefused, CancelResult

if TYPE_CHECKING:
    from django_jobs.console.actions import cancel, retry
    from django_jobs.console.pausing import pause_queue, resume_queue
    from django_jobs.enqueueing import enqueue, enqueue_many

__all__ = [
    "ActionRefused",
    "Backoff",
    "CancelResult",
    "DeadlineExceeded",
    "EnqueueError",
    "ErrorCode",
    "InvalidCheckpoint",
    "InvalidOption",
    "InvalidPayload",
    "InvalidProgress",
    "JobCancelled",
    "JobContext",
    "JobNotFound",
    "LeaseLost",
    "PayloadTooLarge",
    "PermanentError",
    "RateLimitedError",
    "Reconciliation",
    "RetryableError",
    "SkipJob",
    "UnknownJobType",
    "UnknownQueue",
    "cancel",
    "compare_and_set",
    "enqueue",
    "enqueue_many",
    "job",
    "once",
    "pause_queue",
    "resume_queue",
    "retry",
]


def __getattr__(name: str) -> Any:
    # enqueue, the queue functions and the operator's actions import the models, which cannot
    # load before the app registry is ready; keeping them lazy lets settings and jobs.py modules import
    # `from django_jobs import job` freely.
    if name in ("enqueue", "enqueue_many"):
        from django_jobs import enqueueing as module

        return getattr(module, name)
    if name in ("retry", "cancel"):
        from django_jobs.console import actions as operations

        return getattr(operations, name)
    if name in ("pause_queue", "resume_queue"):
        from django_jobs.console import pausing as queues

        return getattr(queues, name)
    raise AttributeError(f"module 'django_jobs' has no attribute {name!r}")
