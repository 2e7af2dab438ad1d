"""Background jobs for Django on PostgreSQL: a job may run more than once, but its business
effect happens once, and the system can always say where every job is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_jobs.backoff import Backoff
from django_jobs.durable_rules import (
    InvalidSignal,
    InvalidStep,
    ReplayMismatch,
    SignalTimeout,
    UnknownSignalKey,
)
from django_jobs.effects import compare_and_set, once
from django_jobs.errors import (
    DeadlineExceeded,
    EnqueueError,
    ErrorCode,
    InvalidCheckpoint,
    InvalidOption,
    InvalidPayload,
    InvalidProgress,
    InvalidWorkflow,
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
from django_jobs.workflow_plan import Chain, Group, Step

if TYPE_CHECKING:
    from django_jobs.console.actions import cancel, cancel_workflow, retry
    from django_jobs.console.bulk import cancel_matching, matching, retry_matching, stop_operation
    from django_jobs.console.job_filter import InvalidFilter, JobFilter, parse_moment
    from django_jobs.console.pausing import pause_queue, resume_queue
    from django_jobs.durable import signal
    from django_jobs.enqueueing import enqueue, enqueue_many
    from django_jobs.reads.queues import QueueDepth, queue_depth
    from django_jobs.runtime.worker import Worker
    from django_jobs.workflows import enqueue_chain, enqueue_group, enqueue_workflow

# The one place the version is written: pyproject.toml reads it, CHANGELOG.md's top entry must
# name it (release/check_version.py).
__version__ = "1.0.0"

__all__ = [
    "ActionRefused",
    "Backoff",
    "CancelResult",
    "Chain",
    "DeadlineExceeded",
    "EnqueueError",
    "ErrorCode",
    "Group",
    "InvalidCheckpoint",
    "InvalidFilter",
    "InvalidOption",
    "InvalidPayload",
    "InvalidProgress",
    "InvalidSignal",
    "InvalidStep",
    "InvalidWorkflow",
    "JobCancelled",
    "JobContext",
    "JobFilter",
    "JobNotFound",
    "LeaseLost",
    "PayloadTooLarge",
    "PermanentError",
    "QueueDepth",
    "RateLimitedError",
    "Reconciliation",
    "ReplayMismatch",
    "RetryableError",
    "SignalTimeout",
    "SkipJob",
    "Step",
    "UnknownJobType",
    "UnknownQueue",
    "UnknownSignalKey",
    "Worker",
    "cancel",
    "cancel_matching",
    "cancel_workflow",
    "compare_and_set",
    "enqueue",
    "enqueue_chain",
    "enqueue_group",
    "enqueue_many",
    "enqueue_workflow",
    "job",
    "matching",
    "once",
    "parse_moment",
    "pause_queue",
    "queue_depth",
    "resume_queue",
    "retry",
    "retry_matching",
    "signal",
    "stop_operation",
]


def __getattr__(name: str) -> Any:
    # enqueue, the queue functions and the operator's actions import the models, which cannot
    # load before the app registry is ready; keeping them lazy lets settings and jobs.py modules import
    # `from django_jobs import job` freely.
    if name == "signal":
        from django_jobs import durable

        return durable.signal
    if name in ("enqueue", "enqueue_many"):
        from django_jobs import enqueueing as module

        return getattr(module, name)
    if name in ("enqueue_chain", "enqueue_group", "enqueue_workflow"):
        from django_jobs import workflows

        return getattr(workflows, name)
    if name in ("retry", "cancel", "cancel_workflow"):
        from django_jobs.console import actions as operations

        return getattr(operations, name)
    if name in ("retry_matching", "cancel_matching", "matching", "stop_operation"):
        from django_jobs.console import bulk

        return getattr(bulk, name)
    if name in ("JobFilter", "InvalidFilter", "parse_moment"):
        from django_jobs.console import job_filter

        return getattr(job_filter, name)
    if name in ("pause_queue", "resume_queue"):
        from django_jobs.console import pausing as queues

        return getattr(queues, name)
    if name == "Worker":
        from django_jobs.runtime import worker

        return worker.Worker
    if name in ("queue_depth", "QueueDepth"):
        from django_jobs.reads import queues as figures

        return getattr(figures, name)
    raise AttributeError(f"module 'django_jobs' has no attribute {name!r}")
