"""Why a running job is still running, or is not really: a cancel it has yet to act on, a
lease that expired (the reaper has yet to take it back), a worker gone silent before its lease
ran out, or a worker that reports and a job at work.

It reads the job's own row and its worker's live-worker row.
"""

from __future__ import annotations

import datetime as dt

from django_jobs.models import Job, LiveWorker
from django_jobs.observe.reasons import Blocker, Reason, duration, silent_seconds, timestamp


def blockers(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """How running ``job`` stands: cancel requested, lease expired, worker silent, or running."""
    worker = LiveWorker.objects.using(db).filter(worker_id=job.worker_id).first()
    lease = job.lease_expires_at
    evidence.append(("worker", str(job.worker_id)))
    evidence.append(("lease until", timestamp(lease) if lease else "—"))
    if job.heartbeat_at is not None:
        evidence.append(("last heartbeat", f"{duration(now - job.heartbeat_at)} ago"))
    where = f"worker {job.worker_id}"
    if worker is None:
        state = "which no longer reports"
    elif worker.is_alive(now):
        state = f"alive (reported {silent_seconds(worker, now)}s ago)"
    else:
        state = f"silent for {silent_seconds(worker, now)}s"
    started = (
        f"since {duration(now - job.started_at)}"
        if job.started_at
        else "claimed ahead, waiting for a free slot"
    )
    found: list[Blocker] = []
    if job.cancel_requested_at is not None:
        found.append(
            Blocker(
                Reason.CANCEL_REQUESTED,
                f"Cancellation was requested {duration(now - job.cancel_requested_at)} ago; it is still "
                f"running on {where}, which cancels it when the handler next checks.",
            )
        )
    if lease is not None and lease < now:
        found.append(
            Blocker(
                Reason.RUNNING_LEASE_EXPIRED,
                f"It is marked running on {where} ({state}), but its lease expired {duration(now - lease)} "
                "ago: the execution is presumed lost, and the reaper takes the job back on its next pass.",
            )
        )
    elif worker is None or not worker.is_alive(now):
        found.append(
            Blocker(
                Reason.RUNNING_WORKER_SILENT,
                f"It is running on {where} ({started}), {state}; its lease runs until {timestamp(lease)}: "
                "if no heartbeat comes by then, the reaper takes the job back.",
            )
        )
    else:
        found.append(
            Blocker(
                Reason.RUNNING,
                f"It is running on {where}, {state}, {started}; its lease runs until {timestamp(lease)}.",
            )
        )
    return found
