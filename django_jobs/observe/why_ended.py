"""What became of a job that no longer waits or runs: completed, skipped, cancelled, failed
(its attempts used up, or an error that is not retried), or parked for review.

It reads the job's row and its latest event (who acted, and why).
"""

from __future__ import annotations

import datetime as dt

from django_jobs.errors import ErrorCode
from django_jobs.models import Job, JobEvent
from django_jobs.observe.reasons import Blocker, Reason, duration, timestamp
from django_jobs.states import JobStatus


def blockers(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """What became of ``job``, which has ended or is parked for review: one reason."""
    last = JobEvent.objects.using(db).filter(job_id=job.id).order_by("-id").first()
    when = job.finished_at or job.failed_at or job.completed_at
    at = f"at {timestamp(when)} ({duration(now - when)} ago)" if when else ""
    if last is not None and last.reason:
        evidence.append(("last event", f"{last.kind} by {last.actor or '—'}: {last.reason}"))
    if job.last_error_code:
        evidence.append(("last error code", job.last_error_code))
    if job.status == JobStatus.COMPLETED:
        return [Blocker(Reason.COMPLETED, f"It completed {at}, after {job.attempts} attempt(s).")]
    if job.status == JobStatus.SKIPPED:
        return [Blocker(Reason.SKIPPED, f"It was skipped {at}: its handler said it no longer applies.")]
    if job.status == JobStatus.CANCELLED and job.last_error_code == ErrorCode.EXPIRED:
        by = "its worker, at its start" if last is not None and last.actor == "worker" else "the reaper"
        return [
            Blocker(
                Reason.EXPIRED,
                f"It expired {at}: it had not started by its start-by deadline "
                f"{timestamp(job.start_by)}, so {by} ended it cancelled (code EXPIRED) without running it.",
            )
        ]
    if job.status == JobStatus.CANCELLED:
        who = f" by {last.actor}" if last is not None and last.actor else ""
        why = f": {last.reason}" if last is not None and last.reason else ""
        return [Blocker(Reason.CANCELLED, f"It was cancelled{who} {at}{why}.")]
    if job.status == JobStatus.NEEDS_REVIEW:
        why = last.reason if last is not None and last.reason else "a blind retry of its type is unsafe"
        return [
            Blocker(
                Reason.NEEDS_REVIEW,
                f"It is parked for review ({why}): an operator resolves it as completed or failed, or "
                "retries it, after checking whether its effect happened.",
            )
        ]
    code = job.last_error_code or "UNKNOWN"
    exhausted = (last is not None and last.reason == "attempts_exhausted") or job.attempts >= job.max_attempts
    if exhausted:
        return [
            Blocker(
                Reason.ATTEMPTS_EXHAUSTED,
                f"It failed {at} with {code} after using all {job.max_attempts} attempts: it is not "
                "retried again; retry it from the console once the cause is fixed.",
            )
        ]
    return [
        Blocker(
            Reason.FAILED,
            f"It failed {at} with {code}, an error that is not retried: retry it from the console once "
            "the cause is fixed.",
        )
    ]
