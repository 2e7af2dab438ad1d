"""The tables of django_jobs, by role: ``jobs`` (the job table and its reads), ``coordination``
(what workers coordinate through: paused queues, concurrency keys, rate windows, schedule ticks
and state, live workers), ``workflows`` (workflows, their steps and what the steps wait for),
``restore`` (the database's identity as workers saw it, restore holds), ``durable`` (a
durable job's steps, signals and signal key), ``operations`` (an
operator's action on every job a filter matches) and ``audit`` (what happened: events, calls
out, effects done, log entries owed).

Every name is importable from here, as ``from django_jobs.models import Job``; status writes
never go through these models (``django_jobs.transitions`` is their only writer).
"""

from __future__ import annotations

from django_jobs.models.audit import (
    ExternalCall,
    JobEvent,
    PendingLogEntry,
    ProcessedEffect,
    QueueEvent,
    ScheduleEvent,
)
from django_jobs.models.coordination import (
    SILENT_AFTER_BEATS,
    ConcurrencyKey,
    LiveWorker,
    Queue,
    RateWindow,
    ScheduleState,
    ScheduleTick,
    TimestampArray,
    silence_threshold,
)
from django_jobs.models.durable import JobSignal, JobStep, SignalKey, StepKind
from django_jobs.models.jobs import Job, JobQuerySet
from django_jobs.models.operations import BulkAction, BulkOperation, BulkOperationJob, BulkOutcome, BulkState
from django_jobs.models.restore import DatabaseIdentity, RestoreHold
from django_jobs.models.workflows import Barrier, RunsIf, StepRole, Workflow, WorkflowKind, WorkflowStep

__all__ = [
    "SILENT_AFTER_BEATS",
    "Barrier",
    "BulkAction",
    "BulkOperation",
    "BulkOperationJob",
    "BulkOutcome",
    "BulkState",
    "ConcurrencyKey",
    "DatabaseIdentity",
    "ExternalCall",
    "Job",
    "JobEvent",
    "JobQuerySet",
    "JobSignal",
    "JobStep",
    "LiveWorker",
    "PendingLogEntry",
    "ProcessedEffect",
    "Queue",
    "QueueEvent",
    "RateWindow",
    "RestoreHold",
    "RunsIf",
    "ScheduleEvent",
    "ScheduleState",
    "ScheduleTick",
    "SignalKey",
    "StepKind",
    "StepRole",
    "TimestampArray",
    "Workflow",
    "WorkflowKind",
    "WorkflowStep",
    "silence_threshold",
]
