"""A worker's steps, one at a time, by hand: claim a job without running it, renew its lease,
report progress and checkpoints, and record its outcome, each through the worker's own
statement or writer (the public names are in ``django_jobs.testing``).

Every write after the claim is fenced as the worker's are, by ``(job id, execution id,
running)``: once the job was taken from the execution (the reaper recovered it after its lease
ran out, another claim took it), nothing written for the execution lands, and each step says so
instead of raising: a ``Renewal`` that is false, ``False``, or ``None`` for an outcome.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened, happened_for
from django_jobs.errors import ErrorCode, PermanentError, RetryableError, class_path
from django_jobs.jsonvalues import checkpoint_json, progress_json
from django_jobs.registry import registry
from django_jobs.results import encode_result
from django_jobs.runtime import outcomes, payloads
from django_jobs.runtime.context import JobContext
from django_jobs.runtime.executor import Finished, context_for
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.pool import lease_for
from django_jobs.runtime.started import read_after_claim
from django_jobs.sanitize import describe
from django_jobs.states import JobStatus
from django_jobs.transitions import Claim, ClaimStatement, workflow_triggers
from django_jobs.transitions.claimable import claim_inputs
from django_jobs.transitions.restore import hold_open

#: The worker id of the executions claimed by hand, unless the caller names one: the form of a
#: worker's own (``host:pid:suffix``), so that the console and the logs show it like any other.
BY_HAND = f"{socket.gethostname()}:{os.getpid()}:by-hand"


@dataclass(frozen=True, eq=False)
class Claimed:
    """An execution claimed by :func:`claim` and held by the caller: the job is ``running``,
    leased to ``worker_id``, until its outcome is recorded or its lease runs out."""

    job_id: int
    execution_id: uuid.UUID
    #: The number of this execution (1 on the first), counted by the claim.
    attempt: int
    max_attempts: int
    type: str
    queue: str
    #: The payload as stored (decoded JSON, before any upcast of the type's ``payload_version``).
    payload: Any
    #: The checkpoint an earlier execution saved, or None.
    checkpoint: Any
    priority: int
    worker_id: str
    #: Seconds each renewal extends the lease by (the type's ``lease``).
    lease_seconds: float
    _claim: Claim = field(repr=False)
    _lease: Lease = field(repr=False)


@dataclass(frozen=True)
class Renewal:
    """What a renewal learnt: whether the execution still holds its job (the renewal is true
    then), and whether an operator asked to cancel it."""

    owned: bool
    cancel_requested: bool

    def __bool__(self) -> bool:
        return self.owned


def claim(
    queues: Sequence[str] | None = None,
    types: Sequence[str] | None = None,
    *,
    worker_id: str = BY_HAND,
) -> Claimed | None:
    """Claim the job a worker would claim next, without running it; None when there is none.

    The worker's own claim statement takes it (``Job.objects.claimable(queues, types)`` lists
    the candidates, in its order), commits it (or, inside a transaction, writes it there) and
    counts the attempt: the job is ``running`` under a new execution id, leased for its type's
    ``lease``. While a restore hold is open, types that may act outside the database wait, as
    for a worker. Nothing runs and no signal is sent: call the handler yourself with
    :func:`context`, or report an outcome with :func:`complete`, :func:`retry`, :func:`fail`
    or :func:`give_back`.
    """
    candidates = registry.among(types)
    if hold_open():  # as a worker's restore watch: a type that may act outside waits
        candidates = [job_type for job_type in candidates if not job_type.acts_outside]
    inputs = claim_inputs(candidates)
    if not inputs.versions:
        return None
    count_workflows_now(jobs_settings.DATABASE)
    statement = ClaimStatement(
        worker_id, list(queues or []), inputs.versions, inputs.leases, inputs.oldest, inputs.rate_limits
    )
    transitions.open_rate_windows(statement.rate_limited)
    sent_at = time.monotonic()
    claims = transitions.claim(statement, 1)
    if not claims:
        return None
    read_after_claim(claims)
    taken = claims[0]
    job_type = registry.get(taken.type)
    assert job_type is not None, "the claim takes only types this process knows"
    lease = lease_for(taken, job_type, worker_id, sent_at)
    return Claimed(
        job_id=taken.id,
        execution_id=taken.execution_id,
        attempt=taken.attempt,
        max_attempts=taken.max_attempts,
        type=taken.type,
        queue=taken.queue,
        payload=payloads.decode_json(taken.payload),
        checkpoint=payloads.decode_json(taken.checkpoint),
        priority=taken.priority,
        worker_id=worker_id,
        lease_seconds=lease.duration,
        _claim=taken,
        _lease=lease,
    )


def renew(claimed: Claimed) -> Renewal:
    """Renew the execution's lease now, by the worker's heartbeat statement: the lease is
    extended by ``lease_seconds`` from the database's now (for a type with ``heartbeat=False``,
    or past the ``timeout`` of a handler :func:`context` started, it is only checked, as a
    worker's heartbeat does). A false renewal: the job is no longer the
    execution's, nothing was written. A context from :func:`context` learns both answers."""
    lease = claimed._lease
    now = time.monotonic()
    beat = lease.beat(now)
    answered = transitions.heartbeat([beat])
    lease.record_beat(claimed.job_id in answered, answered.get(claimed.job_id, False), now, beat)
    return Renewal(claimed.job_id in answered, answered.get(claimed.job_id, False))


def report_progress(claimed: Claimed, done: float, total: float | None = None) -> bool:
    """Store the execution's progress, as ``ctx.progress()`` does (unthrottled); False when the
    job is no longer the execution's (nothing written). Raises ``InvalidProgress`` for a value
    that is not a finite number."""
    return _fenced(
        claimed, transitions.set_progress(claimed.job_id, claimed.execution_id, progress_json(done, total))
    )


def save_checkpoint(claimed: Claimed, data: Any) -> bool:
    """Store a checkpoint for the job's next execution, as ``ctx.save_checkpoint()`` does;
    False when the job is no longer the execution's (nothing written). Raises
    ``InvalidCheckpoint`` for data that is not plain JSON or is too large."""
    encoded = checkpoint_json(data)
    return _fenced(claimed, transitions.set_checkpoint(claimed.job_id, claimed.execution_id, encoded))


def context(claimed: Claimed) -> JobContext:
    """The ``JobContext`` of the held execution, as the worker builds it for the handler: call
    the handler with it (``handler(ctx, claimed.payload)``). Its heartbeat, progress and
    checkpoints write on this thread's connection; its deadline counts from this call. It
    shares the execution's lease with :func:`renew`: a lost lease makes it raise ``LeaseLost``."""
    lease = claimed._lease
    if lease.started is None:
        lease.start()
    return context_for(claimed._claim, lease, registry.get(claimed.type))


def complete(claimed: Claimed, result: Any = None) -> JobStatus | None:
    """Record that the execution returned ``result``, through the worker's outcome writer.

    Returns the job's new status (``completed``), or None when the job is no longer the
    execution's: nothing was written. Raises ``InvalidResult`` for a result that cannot be
    stored, before writing. ``job_finished`` is sent once the write committed.
    """
    return _record(claimed, Finished(claimed._claim, Happened.COMPLETED, ran_for=_ran_for(claimed),
                                     result=encode_result(result)))  # fmt: skip


def retry(
    claimed: Claimed, error: str = "retried by hand", *, code: str | None = None, delay: float | None = None
) -> JobStatus | None:
    """Record that the execution raised ``RetryableError(error, code=code)``, through the
    worker's outcome writer: the job goes back to ``pending`` after its type's backoff, and no
    sooner than ``delay`` seconds when given (a provider's ``Retry-After``), or fails when
    that was its last attempt (its type's ``on_lost``/review rules apply as for a worker).

    Returns the job's new status, or None when the job is no longer the execution's.
    """
    exc = RetryableError(error, code=code)
    return _record(claimed, _raised(claimed, exc, delay))


def fail(claimed: Claimed, error: str = "failed by hand", *, code: str | None = None) -> JobStatus | None:
    """Record that the execution raised ``PermanentError(error, code=code)``, through the
    worker's outcome writer: the job fails at once, whatever attempts it has left.

    Returns the job's new status, or None when the job is no longer the execution's.
    """
    return _record(claimed, _raised(claimed, PermanentError(error, code=code), None))


def give_back(claimed: Claimed) -> JobStatus | None:
    """Give the job back uncounted, as a worker does when its handler could not start because
    the jobs database refused it: ``pending`` again at once, its attempt not counted, its last
    error kept, and no ``job_finished`` (it never ran).

    Returns the job's new status, or None when the job is no longer the execution's.
    """
    return _record(claimed, Finished(claimed._claim, Happened.NOT_STARTED, ErrorCode.DATABASE_UNAVAILABLE))


def count_workflows_now(alias: str) -> None:
    """Inside a transaction that will never commit (a ``TestCase``), count a workflow's large
    groups at each statement: their counts are otherwise finished at commit
    (``transitions.workflow_triggers``), and the callbacks would wait for a commit that never comes."""
    connection = connections[alias]
    if connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(f"SET CONSTRAINTS {workflow_triggers.LEAF_TRIGGER} IMMEDIATE")


def _raised(claimed: Claimed, exc: Exception, delay: float | None) -> Finished:
    """How the executor describes an execution that raised ``exc``."""
    happened, code, _ = happened_for(exc)
    return Finished(
        claimed._claim, happened, code, describe(exc), delay, ran_for=_ran_for(claimed),
        exception=class_path(type(exc)),
    )  # fmt: skip


def _record(claimed: Claimed, finished: Finished) -> JobStatus | None:
    lease = claimed._lease
    cancel_requested = {claimed.job_id} if lease.cancel_requested else set()
    written = outcomes.record([finished], cancel_requested, claimed.worker_id)
    outcomes.announce([finished], written, claimed.worker_id)
    lease.done = True
    outcome = written.get(claimed.job_id)
    if outcome is None:
        lease.lost = True
        return None
    return JobStatus(outcome.status)


def _fenced(claimed: Claimed, written: bool) -> bool:
    if not written:
        claimed._lease.lost = True
    return written


def _ran_for(claimed: Claimed) -> float:
    lease = claimed._lease
    return time.monotonic() - (lease.started if lease.started is not None else lease.claimed)
