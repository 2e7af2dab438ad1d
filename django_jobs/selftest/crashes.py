"""The steps of a run that kill and freeze its workers, and what each must leave.

- SIGKILL: the worker running a held job (its effect applied, the job not completed) is killed.
  Its lease expires, the run recovers the job, and the other worker completes it on a second
  attempt without applying its effect again.
- SIGSTOP: the survivor is frozen while it runs another held job; worker C starts, and once the
  lease expires takes the job over and completes it. The frozen worker is then continued: it
  still runs the job as the execution that lost it, and every write it tries is refused (its
  heartbeat, its outcome): the job, its events and its keys are as C left them.

Durations are from the database's clock, read just after each signal.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from django_jobs.enqueueing import enqueue
from django_jobs.models import Job, JobEvent, ProcessedEffect
from django_jobs.reads.clock import database_now
from django_jobs.selftest.harness import GuaranteeBroken, Harness
from django_jobs.selftest.jobs import HOLD, MAX_ATTEMPTS, applied_key, keys_of
from django_jobs.selftest.processes import WorkerProcess
from django_jobs.states import EventKind, JobStatus

#: How long the first execution of a held job holds its slot: far longer than any step needs,
#: so that it is still running when the run kills or freezes its worker.
HOLD_SECONDS = 60.0


def kill(run: Harness) -> WorkerProcess:
    """The SIGKILL step; returns the worker that survived it."""
    job_id, row = _hold_one(run, "its worker is killed")
    victim = run.worker_of(row.worker_id)
    survivor = next(w for w in run.workers.values() if w is not victim)
    victim.kill()
    killed_at = database_now()
    run.say(f"SIGKILL {victim.label} while it ran job {job_id} (its effect applied, the job not completed)")
    run.figures.recovery_after_kill = _recovered(run, job_id, row.execution_id, killed_at, "SIGKILL")
    done = _completed_once_by(run, job_id, survivor)
    after = ((done.finished_at or killed_at) - killed_at).total_seconds()
    run.say(
        f"  {survivor.label} ran it again and completed it {after:.2f} s after the SIGKILL; its "
        "effect was not applied again"
    )
    return survivor


def freeze(run: Harness, frozen: WorkerProcess) -> None:
    """The SIGSTOP step, on ``frozen``, the one worker left; worker C takes over."""
    job_id, row = _hold_one(run, "its worker is frozen")
    if run.worker_of(row.worker_id) is not frozen:
        raise GuaranteeBroken(
            f"job {job_id} ran on {row.worker_id}, not on {frozen.label}, the only one left"
        )
    frozen.freeze()
    stopped_at = database_now()
    run.say(f"SIGSTOP {frozen.label} while it ran job {job_id}: frozen, its heartbeat with it")
    run.start("C")
    taker = run.workers["C"]
    run.figures.recovery_after_stop = _recovered(run, job_id, row.execution_id, stopped_at, "SIGSTOP")
    _completed_once_by(run, job_id, taker)
    run.say(f"  {taker.label} took it over and completed it; its effect was not applied again")
    before = _snapshot(run, job_id)
    frozen.resume()
    run.say(f"SIGCONT {frozen.label}: it wakes up still running job {job_id}, as the execution that lost it")
    # It learns it lost the job at its first write (a heartbeat), ends the handler and discards
    # the outcome: all of it before it exits, since a stopping worker waits for its jobs.
    status = run.stop(frozen)
    lost = (frozen.summary() or {}).get("lost_leases", 0)
    after = _snapshot(run, job_id)
    if after != before:
        raise GuaranteeBroken(
            f"job {job_id} changed after {frozen.label} woke up: fencing did not hold. "
            + "; ".join(_changes(before, after))
        )
    if not lost:
        raise GuaranteeBroken(
            f"{frozen.label} woke up and did not find its lease lost; its last lines:\n{frozen.tail()}"
        )
    run.say(
        f"  its late writes were refused: its heartbeat found the job no longer its own, and its "
        f"outcome was discarded ({lost} lease lost); job {job_id} is as {taker.label} left it (fenced)"
    )
    statuses = {frozen.label: status, taker.label: run.stop(taker)}
    if any(statuses.values()):
        raise GuaranteeBroken(f"a worker did not stop cleanly on SIGTERM: exit statuses {statuses}")
    run.say(f"stopped {frozen.label} and {taker.label} (SIGTERM): both exited cleanly")


def _hold_one(run: Harness, until: str) -> tuple[int, Job]:
    """Enqueue a held job; once an execution has applied its effect, its id and row."""
    job_id = enqueue(HOLD, {"run": run.run_id, "seconds": HOLD_SECONDS}, queue=run.plan.queue).id
    run.with_effect.append(job_id)
    run.say(f"enqueued job {job_id} ({HOLD}): it applies its effect, then holds its slot until {until}")
    applied = applied_key(run.run_id, job_id, 1)

    def running_with_effect() -> Job | None:
        row = Job.objects.filter(id=job_id, status=JobStatus.RUNNING).first()
        return row if row is not None and ProcessedEffect.objects.filter(key=applied).exists() else None

    return job_id, run.until(running_with_effect, f"job {job_id} to start and apply its effect")


def _recovered(run: Harness, job_id: int, lost: uuid.UUID | None, since: Any, signal_name: str) -> float:
    """Wait for the recovery of ``job_id`` from execution ``lost``; its seconds after ``since``."""
    event = run.until(
        lambda: JobEvent.objects.filter(job_id=job_id, kind=EventKind.RECOVERED, execution_id=lost).first(),
        f"job {job_id} to be recovered from its lost execution",
    )
    seconds = float(((event.created_at or timezone.now()) - since).total_seconds())
    run.say(
        f"  job {job_id} recovered {seconds:.2f} s after the {signal_name}, once its lease of "
        f"{run.plan.lease:g} s expired: back to {event.to_status}"
    )
    return seconds


def _completed_once_by(run: Harness, job_id: int, worker: WorkerProcess) -> Job:
    """Wait for ``job_id`` to end; check that ``worker`` completed it on its second attempt and
    that only the first applied its effect."""
    row = run.until(
        lambda: Job.objects.filter(id=job_id, finished_at__isnull=False).first(), f"job {job_id} to finish"
    )
    if (row.status, row.attempts, row.worker_id) != (JobStatus.COMPLETED, 2, worker.worker_id):
        raise GuaranteeBroken(
            f"job {job_id} should have been completed by {worker.label} on its second attempt; it is "
            f"{row.status} after {row.attempts} attempt(s), last run by {row.worker_id}"
        )
    keys = {applied_key(run.run_id, job_id, a): a for a in range(1, MAX_ATTEMPTS + 1)}
    applied = sorted(
        keys[key] for key in ProcessedEffect.objects.filter(key__in=keys).values_list("key", flat=True)
    )
    if applied != [1]:
        raise GuaranteeBroken(f"the effect of job {job_id} was applied by attempt(s) {applied}, not once")
    return row


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two snapshots of a job, field by field."""
    changed = [
        f"{field}: {before['job'][field]} → {after['job'][field]}"
        for field in before["job"]
        if before["job"][field] != after["job"][field]
    ]
    changed += [
        f"{part}: {before[part]!r} → {after[part]!r}"
        for part in ("events", "keys")
        if before[part] != after[part]
    ]
    return changed


def _snapshot(run: Harness, job_id: int) -> dict[str, Any]:
    """Everything a late write could change about ``job_id``: its row, its events, its keys."""
    fields = [f.attname for f in Job._meta.concrete_fields]
    row = Job.objects.filter(id=job_id).values(*fields).get()
    # Its possible keys by name, read through the ledger's primary key.
    possible = keys_of(run.run_id, job_id, MAX_ATTEMPTS)
    keys = sorted(ProcessedEffect.objects.filter(key__in=possible).values_list("key", flat=True))
    events = list(JobEvent.objects.filter(job_id=job_id).order_by("id").values_list("id", "kind"))
    return {"job": row, "events": events, "keys": keys}
