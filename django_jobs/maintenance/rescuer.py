"""The rescuer: takes back running jobs whose lease expired (River's job rescuer, Oban's Lifeline).

A lease expires when an execution stops proving itself alive: its worker was killed, froze
(SIGSTOP, a long GC pause, a hung call that starves the heartbeat) or lost the database for
longer than the lease. The rescuer then asks :func:`django_jobs.decision.decide`, per job:

- ``pending`` (retried after the type's backoff) while attempts remain;
- ``failed`` when the lost execution was the last attempt;
- ``needs_review`` when the job's stored ``on_lost`` is ``"needs_review"``: its side effect is
  irreversible and not idempotent, so only a human may decide to run it again;
- for a type that marks its external calls (``@job(external_calls=...)``), the marks decide
  instead of ``on_lost``: an execution lost before any mark never reached the provider and is
  retried (code ``LOST_BEFORE_CALL``); one lost after a mark goes to ``needs_review``, or back to
  ``pending`` with code ``LEASE_LOST`` so that the next execution reconciles first (a type
  with ``reconcile``);
- ``cancelled`` when an operator asked to cancel it;
- ``pending`` at once and uncounted when the execution was prefetched and its start was never
  recorded (its worker died with the job still waiting in its buffer).

It clears the owner fields and records a ``recovered`` event with the lost execution's id, and
sends ``job_finished`` for it (after the commit).

Options: none of its own. The lease is on the row (``lease_expires_at``, renewed by the
heartbeat for ``LEASE_TIMEOUT`` or the type's ``lease_timeout``), and so is the safety policy
(``on_lost``, ``max_attempts``): a rescuer in a process that does not know the type decides as
the type's own workers would; the registry only lends the backoff (the default policy for an
unknown type). ``DATABASE`` names the connection.

Defaults: :data:`~django_jobs.maintenance.service.BATCH` (500) jobs per statement, every expired
lease per pass unless ``limit`` says fewer.

Caveats: safe in many processes at once (SKIP LOCKED, updates guarded by the execution id); a
row locked by another transaction (an external call being marked) is skipped, not decided
blind, and taken at the next pass. Database time only: whether a lease expired is ``now()``'s
call. Logs under ``django_jobs.reaper``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from dataclasses import dataclass
from typing import Any

from django_jobs import logs, signals, transitions
from django_jobs.backoff import Random
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened, Situation, decide
from django_jobs.errors import RECONCILE_FIRST, ErrorCode
from django_jobs.maintenance.service import BATCH
from django_jobs.models import Job
from django_jobs.registry import retry_policy
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Expired, Recovery

logger = logging.getLogger("django_jobs.reaper")


@dataclass(frozen=True)
class Recovered:
    """What the reaper did to one job, for the audit of recoveries (``reapjobs --json``)."""

    id: int
    type: str
    lost_execution: str
    worker: str | None
    #: The status the job was moved to.
    status: str
    #: The job's attempts after the recovery.
    attempts: int
    max_attempts: int
    error_code: str
    #: Why, in words: which execution was lost, and why it goes where it goes.
    why: str
    #: Seconds before a job sent back to pending may run again.
    retry_in: float | None = None
    #: The external call the lost execution had marked, if it had.
    marked_call: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def decide_recovery(expired: Expired, rng: Random = random.random) -> Recovery:
    """Where a job whose execution was lost goes next, by :func:`django_jobs.decision.decide`.

    The safety policy comes from the job row, so a reaper in a process that does not know the
    type decides as the type's own workers would; the registry only lends the backoff.
    """
    # A prefetched execution whose start was never recorded is treated as never started.
    attempt = expired.attempts if expired.started else expired.attempts + 1
    happened = Happened.LOST if expired.started else Happened.NOT_STARTED
    marks = expired.on_lost_in_call is not None
    situation = Situation(
        happened, attempt, expired.max_attempts, expired.on_lost, expired.cancel_requested,
        previous_error_code=expired.last_error_code, on_lost_in_call=expired.on_lost_in_call,
        marked_call=expired.marked_call is not None,
    )  # fmt: skip
    decision = decide(situation, lambda: retry_policy(expired.type), rng)
    lost = f"execution {expired.execution_id} on worker {expired.worker_id} stopped renewing its lease"
    if not expired.started:
        lost += " before its start was recorded"
    elif marks and expired.marked_call is not None:
        lost += f" after it marked external call {expired.marked_call!r}"
    elif marks:
        lost += " before it marked any external call: it never reached the provider"
    if decision.reason:
        lost += f" ({decision.reason.replace('_', ' ')})"
    return Recovery(
        expired,
        decision.status,
        event=EventKind.RECOVERED,
        attempts=attempt if decision.counted else attempt - 1,
        error_code=_lost_code(expired),
        delay=decision.delay,
        reason=lost,
    )


def _lost_code(expired: Expired) -> str:
    """The error code a lost execution leaves: ambiguous (``LEASE_LOST``: the next execution
    of a type with ``reconcile`` asks first) unless nothing it could have done is in doubt."""
    if not expired.started:
        # It never began: the doubt of the ending before it, if there was one, is still there.
        if expired.last_error_code in RECONCILE_FIRST:
            return expired.last_error_code
        return ErrorCode.LOST_UNSTARTED
    # No mark: the provider never saw this execution. Unless the previous ending was ambiguous
    # itself, and this execution may have been lost while reconciling it: the doubt is still
    # there, and the next execution must reconcile again.
    unmarked = expired.on_lost_in_call is not None and expired.marked_call is None
    if unmarked and expired.last_error_code not in RECONCILE_FIRST:
        return ErrorCode.LOST_BEFORE_CALL
    return ErrorCode.LEASE_LOST


def run_once(limit: int | None = None) -> list[Recovered]:
    """Recover every expired lease (or at most ``limit``); return what was done, job by job."""
    return recover_jobs(limit)


def recover(limit: int | None = None) -> dict[str, int]:
    """Recover every expired lease (or at most ``limit``); return counts by new status."""
    counts: dict[str, int] = {}
    for job in recover_jobs(limit):
        counts[job.status] = counts.get(job.status, 0) + 1
    return counts


def recover_jobs(limit: int | None = None, *, queue: str | None = None) -> list[Recovered]:
    """Recover every expired lease (or at most ``limit``; with ``queue``, only that queue's:
    the self-test's pass over its own jobs); return what was done, job by job."""
    recovered: list[Recovered] = []
    remaining = limit
    while remaining is None or remaining > 0:
        batch = BATCH if remaining is None else min(BATCH, remaining)
        done = transitions.recover_expired(decide_recovery, batch, queue)
        for recovery in done:
            logger.warning(
                "job recovered id=%s type=%s lost_execution=%s worker=%s attempt=%s/%s → %s",
                recovery.expired.id, recovery.expired.type, recovery.expired.execution_id,
                recovery.expired.worker_id, recovery.attempts, recovery.expired.max_attempts,
                recovery.status, extra=_recovery_fields(recovery.expired),
            )  # fmt: skip
        _announce(done)
        recovered += [_recovered(r) for r in done]
        if remaining is not None:
            remaining -= len(done)
        if len(done) < batch:
            break
    return recovered


def _recovery_fields(expired: Expired) -> dict[str, object]:
    """The fields of the lost execution: its attempt, its execution id, the worker that lost it."""
    attempt = expired.attempts if expired.started else expired.attempts + 1
    return logs.job_fields(
        expired.id, expired.type, expired.queue, attempt, expired.execution_id, expired.worker_id
    )


def _recovered(recovery: Recovery) -> Recovered:
    expired = recovery.expired
    return Recovered(
        id=expired.id,
        type=expired.type,
        lost_execution=str(expired.execution_id),
        worker=expired.worker_id,
        status=str(recovery.status),
        attempts=recovery.attempts,
        max_attempts=expired.max_attempts,
        error_code=recovery.error_code,
        why=recovery.reason,
        retry_in=round(recovery.delay, 3) if recovery.status == JobStatus.PENDING else None,
        marked_call=expired.marked_call,
    )


def _announce(done: list[Recovery]) -> None:
    """``job_finished`` for each execution taken back: the reaper recorded its end."""
    if not done or not signals.listened(signals.job_finished):
        return
    for recovery in done:
        expired = recovery.expired
        signals.after_commit(
            jobs_settings.DATABASE,
            functools.partial(
                signals.send, signals.job_finished, Job, job_id=expired.id, type=expired.type,
                queue=expired.queue, status=str(recovery.status),
                attempt=expired.attempts if expired.started else expired.attempts + 1,
                execution_id=expired.execution_id,
                worker_id=expired.worker_id, duration=None, error_code=recovery.error_code,
                error=recovery.reason,
            ),
        )  # fmt: skip
