"""The outcome writer: turns finished executions into status writes, in batches, and cannot be
poisoned by what a handler reported.

Each :class:`~django_jobs.runtime.executor.Finished` goes through :func:`django_jobs.decision.decide`
and becomes an :class:`~django_jobs.transitions.Outcome` whose every field is storable: the
error text without NUL characters and bounded, the code a bounded string, the delay clamped.
If the database still refuses a batch for its data, the batch is written one row at a time,
and only the row it refuses ends, code ``OUTCOME_INVALID``, where :func:`decide` sends it
(``failed``, or ``cancelled`` on a cancel request, ``needs_review`` when a blind retry is
unsafe) — so the worker never dies of a job's data and the rest of the batch is written.

Over 300 lines: the decision, the batch write, its one-row fallback and the logs of what was
written are one path, read together.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Mapping, Sequence

from django.db import DatabaseError, transaction

from django_jobs import logs, signals, transitions
from django_jobs.backoff import Backoff, Random
from django_jobs.conf import jobs_settings
from django_jobs.decision import MAX_RETRY_DELAY, Happened, Situation, decide
from django_jobs.errors import DATABASE_UNAVAILABLE, ErrorCode
from django_jobs.models import Job
from django_jobs.registry import registry, retry_policy
from django_jobs.runtime.executor import Finished
from django_jobs.sanitize import error_code, storable_text
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Outcome, durable

logger = logging.getLogger("django_jobs.outcomes")


#: What the decision says when a handler returned, whatever else is true: the hot path of a
#: million no-op jobs reads it instead of asking again for each job (a test checks it is what
#: decide() answers for every situation in which the handler returned).
SUCCESS = decide(Situation(Happened.COMPLETED, 1, 1), lambda: Backoff())


def outcome_for(finished: Finished, cancel_requested: bool = False, rng: Random = random.random) -> Outcome:
    """The write that ends ``finished``'s execution, as the decision says. Nothing is logged:
    :func:`record` logs what it wrote, once it is written."""
    claim = finished.claim
    assert finished.happened is not None, "a lost execution has nothing to write"
    if finished.happened is Happened.COMPLETED:
        # The attempt is counted by the write itself if no heartbeat recorded its start.
        return Outcome(
            claim.id, claim.execution_id, SUCCESS.status, ran_for=finished.ran_for, result=finished.result
        )
    # A job given back unstarted keeps the error of its last real attempt (reconcile reads it).
    unstarted = finished.happened is Happened.NOT_STARTED
    code = None if finished.error_code is None or unstarted else error_code(finished.error_code)
    decision = decide(
        Situation(
            finished.happened,
            claim.attempt,
            claim.max_attempts,
            on_lost=claim.on_lost,
            cancel_requested=cancel_requested,
            error_code=code,
            retry_after=_number(finished.retry_after),
            previous_error_code=claim.last_error_code,
            on_lost_in_call=_on_lost_in_call(claim.type),
            marked_call=finished.marked_call,
        ),
        lambda: retry_policy(claim.type),
        rng,
    )
    delay = min(max(0.0, decision.delay), MAX_RETRY_DELAY)
    details: str | None = finished.details
    # The exception's class rides along on the event: a task's result lists it with each error.
    exception = {"exception": finished.exception} if finished.exception else {}
    if decision.status == JobStatus.PENDING and decision.event == EventKind.RETRY_SCHEDULED:
        details = json.dumps({"retry_in": round(delay, 3), **exception})
    elif decision.event == EventKind.SUSPENDED:
        details = finished.details  # where it sleeps or what it waits for
    elif decision.status == JobStatus.FAILED and finished.happened is not Happened.LOST:
        details = json.dumps({"reason": decision.reason, **exception})
    completed = decision.status == JobStatus.COMPLETED
    return Outcome(
        job_id=claim.id,
        execution_id=claim.execution_id,
        status=decision.status,
        delay=delay,
        error_code=None if completed else code,
        error=None
        if completed or unstarted or finished.error is None
        else storable_text(finished.error, jobs_settings.MAX_ERROR_CHARS),
        event=decision.event,
        details=details,
        attempts=claim.attempt if decision.counted else claim.attempt - 1,
        ran_for=finished.ran_for if decision.counted and not claim.counted else None,
        reason=decision.reason or None,
    )


def write(
    finished: Sequence[Finished],
    cancel_requested: set[int] | frozenset[int] = frozenset(),
    worker_id: str | None = None,
) -> dict[int, str]:
    """Write the outcomes of ``finished`` executions; return ``{job id: status written}``.

    A job missing from the result was taken over by another execution (its lease was lost).
    Raises only when the jobs database is unreachable (the caller keeps the batch and retries).
    """
    written = record(finished, cancel_requested, worker_id)
    return {job_id: str(outcome.status) for job_id, outcome in written.items()}


def record(
    finished: Sequence[Finished],
    cancel_requested: set[int] | frozenset[int] = frozenset(),
    worker_id: str | None = None,
) -> dict[int, Outcome]:
    """Write the outcomes of ``finished`` executions, like :func:`write`, and return
    ``{job id: the outcome written}``. ``worker_id`` names the worker in the log lines."""
    live = [f for f in finished if f.happened is not None]
    by_id = {f.claim.id: f for f in live}
    outcomes = [outcome_for(f, f.claim.id in cancel_requested) for f in live]
    written = _write(outcomes, by_id, worker_id)
    # A retry refused because a cancel request arrived since the decision: decide again.
    refused = [o.job_id for o in outcomes if o.job_id not in written and o.status == JobStatus.PENDING]
    again = transitions.cancel_requested_among(refused)
    if again:
        again_outcomes = [outcome_for(by_id[job_id], True) for job_id in again]
        written.update(_write(again_outcomes, by_id, worker_id))
    # A job parked in a wait whose signal came while it ran on from its look: due at once.
    durable.wake_signalled(
        [(j, o.execution_id, by_id[j].signal) for j, o in written.items() if o.status == JobStatus.PENDING]
    )
    # Logged once written: a batch kept through an outage and written later is logged once.
    for job_id, outcome in written.items():
        log_outcome(by_id[job_id], outcome, worker_id)
    return written


def announce(finished: Sequence[Finished], written: dict[int, Outcome], worker_id: str | None) -> None:
    """Send ``job_finished``, and run the type's ``on_finished`` (a task's ``task_finished``),
    for the executions whose outcome was written, once it committed (a job given back
    unstarted did not run: it has none). Costs one check per job when no receiver is connected
    and the type has no ``on_finished``."""
    listened = signals.listened(signals.job_finished)
    alias = jobs_settings.DATABASE
    for f in finished:
        outcome = written.get(f.claim.id)
        if outcome is None or f.happened is Happened.NOT_STARTED:
            continue
        job_type = registry.get(f.claim.type)
        if job_type is not None and job_type.on_finished is not None:
            hook = functools.partial(job_type.on_finished, f.claim.id, str(outcome.status))
            signals.after_commit(alias, hook)
        if not listened:
            continue
        claim = f.claim
        signals.after_commit(
            alias,
            functools.partial(
                signals.send, signals.job_finished, Job, job_id=claim.id, type=claim.type, queue=claim.queue,
                status=str(outcome.status), attempt=claim.attempt, execution_id=claim.execution_id,
                worker_id=worker_id, duration=f.ran_for, error_code=outcome.error_code, error=outcome.error,
            ),
        )  # fmt: skip


def _on_lost_in_call(type_name: str) -> str | None:
    job_type = registry.get(type_name)
    return job_type.on_lost_in_call if job_type is not None else None


def _write(
    outcomes: list[Outcome], by_id: Mapping[int, Finished] | None = None, worker_id: str | None = None
) -> dict[int, Outcome]:
    """Write ``outcomes``; ``by_id`` (the executions they end) and ``worker_id`` name the jobs
    in the log lines of a refused write."""
    try:
        ids = transitions.write_outcomes(outcomes)
        return {o.job_id: o for o in outcomes if o.job_id in ids}
    except DATABASE_UNAVAILABLE:
        raise
    except DatabaseError:
        logger.exception(
            "a batch of %s outcome(s) was refused; writing them one by one", len(outcomes),
            extra=logs.jobs_fields((o.job_id for o in outcomes), worker_id),
        )  # fmt: skip
    written: dict[int, Outcome] = {}
    for outcome in outcomes:
        try:
            if transitions.write_outcomes([outcome]):
                written[outcome.job_id] = outcome
        except DATABASE_UNAVAILABLE:
            raise
        except DatabaseError as exc:
            replacement = _write_refused(outcome, exc, _fields(outcome, by_id or {}, worker_id))
            if replacement is not None:
                written[outcome.job_id] = replacement
    return written


def _fields(outcome: Outcome, by_id: Mapping[int, Finished], worker_id: str | None) -> dict[str, object]:
    finished = by_id.get(outcome.job_id)
    if finished is not None:
        return logs.claim_fields(finished.claim, worker_id)
    return logs.job_fields(outcome.job_id, "", None, None, outcome.execution_id, worker_id)


def _write_refused(outcome: Outcome, exc: DatabaseError, fields: dict[str, object]) -> Outcome | None:
    """End the one job whose outcome the database refused, as :func:`decide` says of an
    unstorable outcome, with a plain, storable error; None when nothing was written."""
    alias = jobs_settings.DATABASE
    try:
        # The row is locked from the read to the write: the decision sees the cancel request
        # as it stands when the job ends.
        with transaction.atomic(using=alias):
            running = transitions.lock_running(outcome.job_id, outcome.execution_id)
            # None: taken over meanwhile, the new execution owns the job.
            replacement = None if running is None else _refused(outcome, exc, running)
            logger.error(
                "outcome refused by the database id=%s status=%s: %s; the job %s (%s)",
                outcome.job_id, outcome.status, type(exc).__name__,
                "is no longer this execution's" if replacement is None else f"ends {replacement.status}",
                ErrorCode.OUTCOME_INVALID, extra=fields,
            )  # fmt: skip
            if replacement is None:
                return None
            return replacement if transitions.write_outcomes([replacement]) else None
    except DATABASE_UNAVAILABLE:
        raise
    except DatabaseError:
        logger.exception("could not end job id=%s; its lease decides", outcome.job_id, extra=fields)
        return None


def _refused(outcome: Outcome, exc: DatabaseError, running: transitions.Running) -> Outcome:
    """The write that ends an execution whose ``outcome`` the database refused."""
    decision = decide(
        Situation(
            Happened.UNSTORABLE,
            running.attempt,
            running.max_attempts,
            on_lost=running.on_lost,
            cancel_requested=running.cancel_requested,
            previous_error_code=running.last_error_code,
            on_lost_in_call=running.on_lost_in_call,
            marked_call=running.marked_call,
        ),
        Backoff,  # never called: an unstorable outcome is not retried
    )
    return Outcome(
        job_id=outcome.job_id,
        execution_id=outcome.execution_id,
        status=decision.status,
        error_code=ErrorCode.OUTCOME_INVALID,
        error=f"the outcome reported for this execution ({outcome.status}) could not be stored: "
        f"{type(exc).__name__}",
        event=decision.event,
        details=json.dumps({"reason": decision.reason}),
        # As the refused write counted it: the refusal changes where the job goes, not that it ran.
        attempts=outcome.attempts,
        ran_for=outcome.ran_for,
        reason=decision.reason,
    )


def _number(value: object) -> float | None:
    """A retry_after as a float, or None when it is not a number at all."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def log_outcome(finished: Finished, outcome: Outcome, worker_id: str | None = None) -> None:
    """Log how ``finished``'s execution ended, as ``outcome`` (written) says."""
    claim = finished.claim
    status, code = outcome.status, outcome.error_code
    if status == JobStatus.COMPLETED:
        # A completion is logged at DEBUG: its fields are built only when the line is written.
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "job completed id=%s type=%s attempt=%s/%s ran=%.3fs",
                claim.id, claim.type, claim.attempt, claim.max_attempts, finished.ran_for or 0.0,
                extra=logs.claim_fields(claim, worker_id),
            )  # fmt: skip
        return
    args = (claim.id, claim.type, claim.attempt, claim.max_attempts, code)
    fields = logs.claim_fields(claim, worker_id)
    if finished.happened in (Happened.NOT_STARTED, Happened.OUTAGE):
        logger.info("job released id=%s type=%s attempt=%s/%s code=%s → %s", *args, status, extra=fields)
    elif status == JobStatus.PENDING:
        logger.info(
            "job retry scheduled id=%s type=%s attempt=%s/%s code=%s in=%.1fs",
            *args, outcome.delay, extra=fields,
        )  # fmt: skip
    elif status in (JobStatus.FAILED, JobStatus.NEEDS_REVIEW):
        logger.warning("job %s id=%s type=%s attempt=%s/%s code=%s", status, *args, extra=fields)
    else:
        logger.info("job %s id=%s type=%s attempt=%s/%s code=%s", status, *args, extra=fields)
