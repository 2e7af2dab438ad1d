"""The words of a diagnosis: the reason codes, a reason with its sentence (:class:`Blocker`),
and how times, durations and workers are said in those sentences.

Shared by :mod:`~django_jobs.observe.diagnosis` and the families of reasons it asks
(:mod:`~django_jobs.observe.why_pending`, :mod:`~django_jobs.observe.why_running`,
:mod:`~django_jobs.observe.why_ended`), so that every sentence says a time the same way.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass

from django_jobs.models import LiveWorker

#: The most holders of a concurrency key, and the most workers, named in one explanation.
MAX_NAMED = 5


class Reason(enum.StrEnum):
    """What keeps a job from running (or what became of it); stable codes for scripts."""

    COMPLETED = "completed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    #: Not started by its start-by deadline: ended cancelled, code EXPIRED (or, pending past
    #: it, about to be).
    EXPIRED = "expired"
    FAILED = "failed"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    NEEDS_REVIEW = "needs_review"
    CANCEL_REQUESTED = "cancel_requested"
    RUNNING = "running"
    #: Running, but its worker has gone silent; its lease has not expired yet.
    RUNNING_WORKER_SILENT = "running_worker_silent"
    #: Running by its row, but its lease expired: the reaper has yet to take it back.
    RUNNING_LEASE_EXPIRED = "running_lease_expired"
    #: A workflow's step, waiting for the jobs before it to end.
    WAITING = "waiting"
    QUEUE_PAUSED = "queue_paused"
    #: A restore hold is open and the job's type may act outside the database.
    RESTORE_HOLD = "restore_hold"
    BACKOFF = "backoff"
    #: A durable job asleep (``ctx.sleep``) until its wake time.
    SLEEPING = "sleeping"
    #: A durable job parked in ``ctx.wait_for`` until its signal or its timeout.
    WAITING_FOR_SIGNAL = "waiting_for_signal"
    DELAYED = "delayed"
    NO_WORKER = "no_worker"
    TYPE_UNKNOWN = "type_unknown"
    VERSION_UNSUPPORTED = "version_unsupported"
    CONCURRENCY_KEY_HELD = "concurrency_key_held"
    RATE_LIMITED = "rate_limited"
    CLAIMABLE = "claimable"


@dataclass(frozen=True)
class Blocker:
    """One reason that applies to a job, and the sentence that tells it."""

    reason: Reason
    sentence: str


def timestamp(moment: dt.datetime | None) -> str:
    """A moment in UTC, to the second; a dash for none."""
    if moment is None:
        return "—"
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(delta: dt.timedelta) -> str:
    """A duration the way people say it: 42s, 3m 5s, 2h 10m, 3d 4h."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def silent_seconds(worker: LiveWorker, now: dt.datetime) -> int:
    """Whole seconds since ``worker`` last reported."""
    return int(worker.silent_seconds(now))


def worker_names(workers: list[LiveWorker], note: Callable[[LiveWorker], str] | None = None) -> str:
    """The first ``MAX_NAMED`` workers by id (each with its ``note``), and how many more."""
    shown = [f"{w.worker_id} ({note(w)})" if note else w.worker_id for w in workers[:MAX_NAMED]]
    more = f" and {len(workers) - MAX_NAMED} more" if len(workers) > MAX_NAMED else ""
    return ", ".join(shown) + more
