"""Why a pending job waits, in the order it meets the reasons: a person (its queue is paused,
or a restore hold keeps its type waiting), then time (it is not due yet: a backoff, a delay, a
job given back), then workers (none serves its queue, runs its type, or reads its payload
version), then limits (its concurrency key is held, its type's rate window is full). With none
of these, it is claimable and waits its turn. A durable job that is not due sleeps or waits
for a signal (``reads.durable``), which is said instead of a delay.

Each reads the database through the models' managers: the queue's pause, the open restore
hold, the job's latest event, the live-worker rows, the running holders of its key (the
``django_jobs_key_running`` index) and its type's rate window.
"""

from __future__ import annotations

import datetime as dt
import sys

from django.apps import apps

from django_jobs.apps import discovered_module_names, discovered_modules
from django_jobs.models import Job, JobEvent, LiveWorker, Queue, RateWindow, silence_threshold
from django_jobs.models.restore import open_hold
from django_jobs.observe.reasons import (
    MAX_NAMED,
    Blocker,
    Reason,
    duration,
    silent_seconds,
    timestamp,
    worker_names,
)
from django_jobs.reads import durable as durable_reads
from django_jobs.registry import registry
from django_jobs.states import EventKind, JobStatus


def blockers(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """What keeps pending ``job`` from being claimed, in blocking order; adds to ``evidence``."""
    found: list[Blocker] = []
    paused = Queue.objects.using(db).filter(name=job.queue, paused_at__isnull=False).first()
    if paused is not None and paused.paused_at is not None:
        found.append(
            Blocker(
                Reason.QUEUE_PAUSED,
                f"Its queue {job.queue} is paused, by {paused.paused_by} since {timestamp(paused.paused_at)} "
                f"({duration(now - paused.paused_at)} ago), because: {paused.reason}. Nothing claims from "
                "it until someone resumes it.",
            )
        )
    held = _restore_hold(job, now, db)
    if held is not None:
        found.append(held)
    evidence.append(("available at", timestamp(job.available_at)))
    expired = _deadline(job, now, evidence)
    if expired is not None:
        return [expired, *found]
    if job.available_at > now:
        found.append(_not_due(job, now, db))
    found.extend(_workers(job, now, db, evidence))
    found.extend(_limits(job, now, db))
    if not found:
        found.append(_claimable(job, now, db, evidence))
    return found


def _deadline(job: Job, now: dt.datetime, evidence: list[tuple[str, str]]) -> Blocker | None:
    """A start-by deadline and a debounce key, as evidence; past the deadline, the reason: the job
    never starts."""
    if job.debounce_key is not None:
        evidence.append(("debounce key", f"{job.debounce_key} (a new enqueue of it pushes the start back)"))
    if job.start_by is None:
        return None
    if job.start_by > now:
        evidence.append(("start by", f"{timestamp(job.start_by)} (in {duration(job.start_by - now)})"))
        return None
    evidence.append(("start by", f"{timestamp(job.start_by)} ({duration(now - job.start_by)} ago)"))
    return Blocker(
        Reason.EXPIRED,
        f"Its start-by deadline passed at {timestamp(job.start_by)}: it never starts. The reaper's next "
        "pass ends it cancelled (code EXPIRED), or a worker that claims it first ends it so at its start.",
    )


def _restore_hold(job: Job, now: dt.datetime, db: str) -> Blocker | None:
    """An open restore hold, for a job whose type may act outside the database."""
    job_type = registry.get(job.type)
    if job_type is None or not job_type.acts_outside:
        return None
    hold = open_hold(db)
    if hold is None:
        return None
    since = f"since {timestamp(hold.opened_at)}, {duration(now - hold.opened_at)} ago"
    return Blocker(
        Reason.RESTORE_HOLD,
        f"Restore hold {hold.id} is open ({hold.get_kind_display().lower()}, {since}): no worker starts "
        f"a job of type {job.type}, whose effects may be outside the database, until an operator "
        "releases it (manage.py jobsrestore; docs/operations/restore.md).",
    )


def _not_due(job: Job, now: dt.datetime, db: str) -> Blocker:
    wait = f"in {duration(job.available_at - now)} (at {timestamp(job.available_at)})"
    parked = durable_reads.suspension(job.id, db)
    if parked is not None:
        return _suspended(parked, now)
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


def _suspended(parked: durable_reads.Suspension, now: dt.datetime) -> Blocker:
    """A durable job asleep, or waiting for a signal (docs/durable-jobs.md)."""
    left = f"in {duration(parked.until - now)}"
    if parked.kind == "sleep":
        return Blocker(
            Reason.SLEEPING,
            f"It is sleeping until {timestamp(parked.until)} ({left}), since {timestamp(parked.since)}: "
            f"its handler called ctx.sleep ({parked.name}). It is due then, and replays past the sleep.",
        )
    key = f"on key `{parked.key}`" if parked.key else "(it has no signal key: nothing can signal it)"
    return Blocker(
        Reason.WAITING_FOR_SIGNAL,
        f"It is waiting for signal `{parked.name}` {key} since {timestamp(parked.since)}, times out at "
        f"{timestamp(parked.until)} ({left}). django_jobs.signal(key, {parked.name!r}, data) makes it due "
        "at once; at the timeout its handler gets SignalTimeout.",
    )


def _workers(job: Job, now: dt.datetime, db: str, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """No live worker serves its queue, runs its type, or reads its payload version."""
    workers = list(LiveWorker.objects.using(db).order_by("worker_id"))
    serving = [w for w in workers if w.serves(job.queue)]
    alive = [w for w in serving if w.is_alive(now)]
    silent = [w for w in serving if not w.is_alive(now)]
    nobody = f"none (live = reported within {silence_threshold():g}s)"
    evidence.append(("live workers serving its queue", worker_names(alive) or nobody))
    if silent:
        evidence.append(
            (
                "silent workers serving its queue",
                worker_names(silent, lambda w: f"silent {silent_seconds(w, now)}s"),
            )
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
    found: list[Blocker] = []
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
            found.append(
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
                found.append(
                    Blocker(
                        Reason.RATE_LIMITED,
                        f"Its type's rate limit ({limit_.count} starts per {limit_.seconds:g}s) is used "
                        f"up: room opens in {duration(opens - now)} (at {timestamp(opens)}).",
                    )
                )
    return found


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
        f"It is due since {duration(now - job.available_at)} and claimable now, but no worker has taken it "
        f"yet: {worker_names(workers)} could (jobs of better priority, or due longer, come first).",
    )
