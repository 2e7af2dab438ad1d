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

Used by ``manage.py explainjob`` and by the job's page in the console.
"""

from __future__ import annotations

import datetime as dt
import enum
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps

from django_jobs.apps import discovered_module_names, discovered_modules
from django_jobs.conf import jobs_settings
from django_jobs.errors import JobNotFound as JobNotFound  # re-exported: callers of explain() catch it here
from django_jobs.models import Job, JobEvent, LiveWorker, Queue, RateWindow, silence_threshold
from django_jobs.reads.clock import database_now
from django_jobs.registry import registry
from django_jobs.states import EventKind, JobStatus

#: The most holders of a concurrency key, and the most workers, named in one explanation.
MAX_NAMED = 5
#: The largest id a job can have (``bigint``).
MAX_JOB_ID = 2**63 - 1


class Reason(enum.StrEnum):
    """What keeps a job from running (or what became of it); stable codes for scripts."""

    COMPLETED = "completed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    FAILED = "failed"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    NEEDS_REVIEW = "needs_review"
    CANCEL_REQUESTED = "cancel_requested"
    RUNNING = "running"
    #: Running, but its worker has gone silent; its lease has not expired yet.
    RUNNING_WORKER_SILENT = "running_worker_silent"
    #: Running by its row, but its lease expired: the reaper has yet to take it back.
    RUNNING_LEASE_EXPIRED = "running_lease_expired"
    QUEUE_PAUSED = "queue_paused"
    BACKOFF = "backoff"
    DELAYED = "delayed"
    NO_WORKER = "no_worker"
    TYPE_UNKNOWN = "type_unknown"
    VERSION_UNSUPPORTED = "version_unsupported"
    CONCURRENCY_KEY_HELD = "concurrency_key_held"
    RATE_LIMITED = "rate_limited"
    CLAIMABLE = "claimable"


@dataclass(frozen=True)
class Blocker:
    reason: Reason
    sentence: str


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
        blockers = _pending(job, now, db, evidence)
    elif job.status == JobStatus.RUNNING:
        blockers = _running(job, now, db, evidence)
    else:
        blockers = _finished(job, now, db, evidence)
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


# ---- pending ------------------------------------------------------------------------------------


def _pending(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    blockers: list[Blocker] = []
    paused = Queue.objects.using(db).filter(name=job.queue, paused_at__isnull=False).first()
    if paused is not None and paused.paused_at is not None:
        blockers.append(
            Blocker(
                Reason.QUEUE_PAUSED,
                f"Its queue {job.queue} is paused, by {paused.paused_by} since {_at(paused.paused_at)} "
                f"({_span(now - paused.paused_at)} ago), because: {paused.reason}. Nothing claims from "
                "it until someone resumes it.",
            )
        )
    evidence.append(("available at", _at(job.available_at)))
    if job.available_at > now:
        blockers.append(_not_due(job, now, db))
    blockers.extend(_workers(job, now, db, evidence))
    blockers.extend(_limits(job, now, db))
    if not blockers:
        blockers.append(_claimable(job, now, db, evidence))
    return blockers


def _not_due(job: Job, now: dt.datetime, db: str) -> Blocker:
    wait = f"in {_span(job.available_at - now)} (at {_at(job.available_at)})"
    last = JobEvent.objects.using(db).filter(job_id=job.id).order_by("-id").first()
    if last is not None and last.kind == EventKind.RETRY_SCHEDULED:
        cause = f"with {last.error_code}" if last.error_code else "with an error"
        asked = " (the provider asked to wait: Retry-After)" if last.error_code == "RATE_LIMITED" else ""
        return Blocker(
            Reason.BACKOFF,
            f"It is scheduled to retry {wait}: backoff after attempt {last.attempt} failed {cause}{asked}.",
        )
    if last is not None and last.kind in (EventKind.RECOVERED, EventKind.RELEASED):
        by = "the reaper" if last.kind == EventKind.RECOVERED else "its worker"
        return Blocker(Reason.DELAYED, f"It was given back by {by} and is not due before {wait[3:]}.")
    return Blocker(Reason.DELAYED, f"It was enqueued to run later: it is due {wait}.")


def _workers(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """No live worker serves its queue, runs its type, or reads its payload version."""
    workers = list(LiveWorker.objects.using(db).order_by("worker_id"))
    serving = [w for w in workers if w.serves(job.queue)]
    alive = [w for w in serving if w.is_alive(now)]
    silent = [w for w in serving if not w.is_alive(now)]
    nobody = f"none (live = reported within {silence_threshold():g}s)"
    evidence.append(("live workers serving its queue", _names(alive) or nobody))
    if silent:
        evidence.append(
            ("silent workers serving its queue", _names(silent, lambda w: f"silent {_seconds(w, now)}s"))
        )
    if not alive:
        return [
            Blocker(
                Reason.NO_WORKER,
                f"No live worker serves its queue {job.queue}"
                + (f": {len(silent)} that did are silent." if silent else ".")
                + f" Start one: manage.py runjobs --queue {job.queue}.",
            )
        ]
    knowing = [w for w in alive if w.reads(job.type) is not None]
    if not knowing:
        modules = discovered_modules()
        evidence.append(("modules every process imports at start-up", ", ".join(modules) or "none"))
        return [
            Blocker(
                Reason.TYPE_UNKNOWN,
                f"None of the {len(alive)} live worker(s) serving queue {job.queue} runs job type "
                f"{job.type}. A worker knows the types registered by the modules it imports at "
                f"start-up: {_discovered_sentence()} {_how_to_register(job)}",
            )
        ]
    newest = max(w.reads(job.type) or 0 for w in knowing)
    if job.version > newest:
        return [
            Blocker(
                Reason.VERSION_UNSUPPORTED,
                f"Its payload version {job.version} is newer than any live worker of queue {job.queue} "
                f"reads (newest: {newest}): it waits for workers of the new release.",
            )
        ]
    job_type = registry.get(job.type)
    if job_type is not None and job.version < job_type.oldest_readable_version:
        return [
            Blocker(
                Reason.VERSION_UNSUPPORTED,
                f"Its payload version {job.version} is older than this code's upcasters reach (oldest: "
                f"{job_type.oldest_readable_version}): add the missing upcaster.",
            )
        ]
    return []


def _discovered_sentence() -> str:
    """Which modules of each installed app every process imports, in words."""
    names = discovered_module_names()
    files = " and ".join(f"{name}.py" for name in names)
    tasks = "" if "tasks" in names else " (and tasks.py when TASKS runs on django_jobs)"
    return f"the {files} of each installed app{tasks}, and whatever those import."


def _how_to_register(job: Job) -> str:
    """What to do so that workers know ``job``'s type, from what this process knows of it."""
    job_type = registry.get(job.type)
    if job_type is not None:  # this process imports it the way workers do: they run other code
        where = getattr(job_type.handler, "__module__", None) or "a discovered module"
        return (
            f"This release registers it (in {where}): restart those workers with it, "
            "or check that they run with the same settings."
        )
    module = _task_module(job)
    if module is not None and module not in sys.modules:
        package, _, leaf = module.rpartition(".")
        return (
            f"It is a task of module {module}, which none of those imports: import it from one "
            f"(add `from {package} import {leaf}  # noqa: F401` to a tasks.py) or move the task into "
            "one, then restart the workers."
        )
    return (
        "Register it with @job in one of those modules (or import the module that does from one), "
        "then restart the workers."
    )


def _task_module(job: Job) -> str | None:
    """The module of the task ``job`` runs (its type is the task's dotted path), or None when
    it does not look like a task of Django's Tasks framework."""
    module, _, function = job.type.rpartition(".")
    if not module or not function.isidentifier() or not isinstance(job.payload, dict):
        return None
    if set(job.payload) != {"args", "kwargs"} or "." not in module:
        return None
    return module if apps.get_containing_app_config(module) is not None else None


def _limits(job: Job, now: dt.datetime, db: str) -> list[Blocker]:
    """Its concurrency key at its limit; its type's rate window full."""
    blockers: list[Blocker] = []
    if job.concurrency_key is not None:
        limit = job.concurrency_limit or 1
        # Served by the django_jobs_key_running index.
        holders = list(
            Job.objects.using(db)
            .filter(status=JobStatus.RUNNING, type=job.type, concurrency_key=job.concurrency_key)
            .order_by("id")
            .values_list("id", "worker_id")[: max(limit, MAX_NAMED)]
        )
        if len(holders) >= limit:
            named = ", ".join(f"job {jid} (on {worker})" for jid, worker in holders[:MAX_NAMED])
            blockers.append(
                Blocker(
                    Reason.CONCURRENCY_KEY_HELD,
                    f"Its concurrency key {job.concurrency_key} is held by {named}: at most {limit} "
                    f"job(s) of {job.type} with this key run at once.",
                )
            )
    job_type = registry.get(job.type)
    if job_type is not None and job_type.rate_limit is not None:
        window = RateWindow.objects.using(db).filter(type=job.type).first()
        starts = sorted(window.starts) if window is not None else []
        limit_ = job_type.rate_limit
        if len(starts) >= limit_.count:
            opens = starts[-limit_.count] + dt.timedelta(seconds=limit_.seconds)
            if opens > now:
                blockers.append(
                    Blocker(
                        Reason.RATE_LIMITED,
                        f"Its type's rate limit ({limit_.count} starts per {limit_.seconds:g}s) is used "
                        f"up: room opens in {_span(opens - now)} (at {_at(opens)}).",
                    )
                )
    return blockers


def _claimable(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> Blocker:
    workers = [
        w
        for w in LiveWorker.objects.using(db).order_by("worker_id")
        if w.is_alive(now) and w.serves(job.queue) and (w.reads(job.type) or 0) >= job.version
    ]
    claimable = Job.objects.using(db).claimable().filter(id=job.id).exists()
    rule = "claimable now" if claimable else "not claimable by this code"
    evidence.append(("claim rule of this code", rule))
    busy = sum(w.running for w in workers)
    slots = sum(w.concurrency for w in workers)
    evidence.append(("held by those workers", f"{busy} job(s) in {slots} slot(s)"))
    return Blocker(
        Reason.CLAIMABLE,
        f"It is due since {_span(now - job.available_at)} and claimable now, but no worker has taken it "
        f"yet: {_names(workers)} could (jobs of better priority, or due longer, come first).",
    )


# ---- running ------------------------------------------------------------------------------------


def _running(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    worker = LiveWorker.objects.using(db).filter(worker_id=job.worker_id).first()
    lease = job.lease_expires_at
    evidence.append(("worker", str(job.worker_id)))
    evidence.append(("lease until", _at(lease) if lease else "—"))
    if job.heartbeat_at is not None:
        evidence.append(("last heartbeat", f"{_span(now - job.heartbeat_at)} ago"))
    where = f"worker {job.worker_id}"
    if worker is None:
        state = "which no longer reports"
    elif worker.is_alive(now):
        state = f"alive (reported {_seconds(worker, now)}s ago)"
    else:
        state = f"silent for {_seconds(worker, now)}s"
    started = (
        f"since {_span(now - job.started_at)}" if job.started_at else "claimed ahead, waiting for a free slot"
    )
    blockers: list[Blocker] = []
    if job.cancel_requested_at is not None:
        blockers.append(
            Blocker(
                Reason.CANCEL_REQUESTED,
                f"Cancellation was requested {_span(now - job.cancel_requested_at)} ago; it is still running "
                f"on {where}, which cancels it when the handler next checks.",
            )
        )
    if lease is not None and lease < now:
        blockers.append(
            Blocker(
                Reason.RUNNING_LEASE_EXPIRED,
                f"It is marked running on {where} ({state}), but its lease expired {_span(now - lease)} "
                "ago: the execution is presumed lost, and the reaper takes the job back on its next pass.",
            )
        )
    elif worker is None or not worker.is_alive(now):
        blockers.append(
            Blocker(
                Reason.RUNNING_WORKER_SILENT,
                f"It is running on {where} ({started}), {state}; its lease runs until {_at(lease)}: "
                "if no heartbeat comes by then, the reaper takes the job back.",
            )
        )
    else:
        blockers.append(
            Blocker(
                Reason.RUNNING,
                f"It is running on {where}, {state}, {started}; its lease runs until {_at(lease)}.",
            )
        )
    return blockers


# ---- finished or parked ---------------------------------------------------------------------------


def _finished(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    last = JobEvent.objects.using(db).filter(job_id=job.id).order_by("-id").first()
    when = job.finished_at or job.failed_at or job.completed_at
    at = f"at {_at(when)} ({_span(now - when)} ago)" if when else ""
    if last is not None and last.reason:
        evidence.append(("last event", f"{last.kind} by {last.actor or '—'}: {last.reason}"))
    if job.last_error_code:
        evidence.append(("last error code", job.last_error_code))
    if job.status == JobStatus.COMPLETED:
        return [Blocker(Reason.COMPLETED, f"It completed {at}, after {job.attempts} attempt(s).")]
    if job.status == JobStatus.SKIPPED:
        return [Blocker(Reason.SKIPPED, f"It was skipped {at}: its handler said it no longer applies.")]
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


# ---- wording --------------------------------------------------------------------------------------


def _at(moment: dt.datetime | None) -> str:
    if moment is None:
        return "—"
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(delta: dt.timedelta) -> str:
    """A duration the way people say it: 42s, 3m 5s, 2h 10m, 3d 4h."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _seconds(worker: LiveWorker, now: dt.datetime) -> int:
    return int(worker.silent_seconds(now))


def _names(workers: list[LiveWorker], note: Callable[[LiveWorker], str] | None = None) -> str:
    shown = [f"{w.worker_id} ({note(w)})" if note else w.worker_id for w in workers[:MAX_NAMED]]
    more = f" and {len(workers) - MAX_NAMED} more" if len(workers) > MAX_NAMED else ""
    return ", ".join(shown) + more
