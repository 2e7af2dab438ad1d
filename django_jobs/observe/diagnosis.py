"""Why is this job not running? ``explain()`` answers for one job: a reason code, one plain
sentence, and the evidence behind it as label / value pairs.

Everything comes from the database, read by its clock (``now()``): the job's row, its latest
event, its queue's pause, the live-worker rows (each worker says which queues it serves and,
once, which job types it runs with the newest payload version of each), the running holders of
its concurrency key and its type's rate window. When several reasons apply, the sentence gives
the one that blocks first, in the order a pending job meets them: a person (a paused queue),
then time (not due yet), then workers (none serves the queue, runs the type, reads the
version), then limits (its concurrency key, its type's rate window). The others are listed in
the evidence under "also".

Used by ``manage.py explainjob`` and by the job's page in the console. This module answers and
says which family of reasons to ask, by the job's status: :mod:`~django_jobs.observe.why_pending`,
:mod:`~django_jobs.observe.why_running`, :mod:`~django_jobs.observe.why_waiting` (a workflow's
step), :mod:`~django_jobs.observe.why_ended`; the reason
codes and their wording are in :mod:`~django_jobs.observe.reasons`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django_jobs.conf import jobs_settings
from django_jobs.errors import JobNotFound as JobNotFound  # re-exported: callers of explain() catch it here
from django_jobs.models import Job
from django_jobs.names import MAX_JOB_ID
from django_jobs.observe import why_ended, why_pending, why_running, why_waiting
from django_jobs.observe.reasons import MAX_NAMED as MAX_NAMED  # re-exported: the face of a diagnosis
from django_jobs.observe.reasons import Blocker as Blocker
from django_jobs.observe.reasons import Reason as Reason
from django_jobs.reads.clock import database_now
from django_jobs.states import JobStatus


@dataclass(frozen=True)
class Explanation:
    job_id: int
    status: str
    reason: Reason
    sentence: str
    evidence: list[tuple[str, str]]
    #: Other reasons that apply too, after the first.
    also: list[Reason] = field(default_factory=list)
    checked_at: dt.datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job_id,
            "status": self.status,
            "reason": str(self.reason),
            "sentence": self.sentence,
            "evidence": [{"label": label, "value": value} for label, value in self.evidence],
            "also": [str(reason) for reason in self.also],
            "checked_at": self.checked_at.isoformat() if self.checked_at else None,
        }


def explain(job_or_id: Job | int) -> Explanation:
    """Why ``job_or_id`` is not running, or what became of it.

    Raises ``JobNotFound`` for an id no job has, ``ValueError`` for one no job can have (not
    a positive integer within ``bigint``).
    """
    db = jobs_settings.DATABASE
    job = _load(job_or_id, db)
    now = database_now()
    evidence: list[tuple[str, str]] = [
        ("status", job.status),
        ("type", f"{job.type} (payload version {job.version})"),
        ("queue", job.queue),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
    ]
    if job.status == JobStatus.PENDING:
        blockers = why_pending.blockers(job, now, db, evidence)
    elif job.status == JobStatus.RUNNING:
        blockers = why_running.blockers(job, now, db, evidence)
    elif job.status == JobStatus.WAITING:
        blockers = why_waiting.blockers(job, evidence)
    else:
        blockers = why_ended.blockers(job, now, db, evidence)
    first, others = blockers[0], blockers[1:]
    evidence.extend(("also", other.sentence) for other in others)
    return Explanation(
        job_id=job.id,
        status=job.status,
        reason=first.reason,
        sentence=first.sentence,
        evidence=evidence,
        also=[other.reason for other in others],
        checked_at=now,
    )


def parse_job_id(text: str) -> int:
    """A job id from user input; ``ValueError`` with a plain message for anything else."""
    value = text.strip()
    if not value.isdigit() or not value.isascii():
        raise ValueError(f"{text!r} is not a job id: give a positive whole number")
    number = int(value)
    if not 1 <= number <= MAX_JOB_ID:
        raise ValueError(f"{text!r} is not a job id: ids run from 1 to {MAX_JOB_ID}")
    return number


def _load(job_or_id: Job | int, db: str) -> Job:
    if isinstance(job_or_id, Job):
        return job_or_id
    if isinstance(job_or_id, bool) or not isinstance(job_or_id, int) or not 1 <= job_or_id <= MAX_JOB_ID:
        raise ValueError(f"{job_or_id!r} is not a job id: ids run from 1 to {MAX_JOB_ID}")
    job = Job.objects.using(db).filter(pk=job_or_id).first()
    if job is None:
        raise JobNotFound(f"no job has id {job_or_id} (it never existed, or retention pruned it)")
    return job
