"""Runs ONE claimed job and says how it ended. No loop, no signals, no status writes.

The handler runs on the calling thread's own database connection, in autocommit mode: never
inside a transaction opened for the claim, which committed before the job was handed over.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.context import JobContext, Lease, LeaseLost
from django_jobs.errors import AMBIGUOUS_CODES, ErrorCode, OutcomeKind, PermanentError, classify
from django_jobs.registry import JobType, Reconciliation, registry
from django_jobs.sanitize import sanitize, truncate
from django_jobs.states import EventKind, JobStatus
from django_jobs.transitions import Claim, Outcome

logger = logging.getLogger("django_jobs.executor")


@dataclass(frozen=True, slots=True)
class Execution:
    outcome: Outcome | None  # None: the lease was lost, there is nothing to write
    duration: float  # seconds spent in the handler


def execute(claim: Claim, lease: Lease) -> Execution:
    """Run the handler of ``claim`` and turn what happened into an :class:`Outcome`.

    ``lease`` is shared with the worker's heartbeat: through it the handler learns of a lost
    lease, a cancellation request or its deadline. When the previous attempt may have done its
    side effect (``AMBIGUOUS_CODES``) and the type can ``reconcile``, it is asked first.
    """
    started = time.perf_counter()
    job_type = registry.get(claim.type)
    lease.start()
    try:
        if job_type is None:  # the claim filters on known types; a test may unregister one
            raise PermanentError(f"no handler for job type {claim.type!r}", code=ErrorCode.PAYLOAD_INVALID)
        payload = decode_payload(claim, job_type)
        ctx = JobContext(
            job_id=claim.id,
            type=claim.type,
            queue=claim.queue,
            attempt=claim.attempt,
            max_attempts=claim.max_attempts,
            execution_id=claim.execution_id,
            unique_key=claim.unique_key,
            checkpoint=_decode_json(claim.checkpoint),
            lease=lease,
        )
        outcome = _reconcile(claim, job_type, ctx, payload)
        if outcome is None:
            job_type.handler(ctx, payload)
            outcome = Outcome(claim.id, claim.execution_id, JobStatus.COMPLETED)
    except LeaseLost:
        outcome = None
    except Exception as exc:  # every handler error becomes an outcome
        outcome = failure_outcome(claim, job_type, exc)
    finally:
        lease.done = True
        _drop_broken_connections()
    if outcome is None or lease.lost:
        # The job was taken over: its state belongs to the new owner, and the guarded write
        # would be refused anyway.
        logger.warning("lease lost id=%s execution=%s type=%s", claim.id, claim.execution_id, claim.type)
        outcome = None
    return Execution(outcome, time.perf_counter() - started)


def _reconcile(claim: Claim, job_type: JobType, ctx: JobContext, payload: dict[str, Any]) -> Outcome | None:
    """Ask the type whether an ambiguous previous attempt did its effect; None: run the handler."""
    if job_type.reconcile is None or claim.last_error_code not in AMBIGUOUS_CODES:
        return None
    answer = job_type.reconcile(ctx, payload)
    logger.info("job reconciled id=%s type=%s answer=%s", claim.id, claim.type, answer.value)
    details = json.dumps({"answer": answer.value, "previous_error": claim.last_error_code})
    if answer is Reconciliation.DONE:
        return Outcome(
            claim.id, claim.execution_id, JobStatus.COMPLETED, event=EventKind.RECONCILED, details=details
        )
    if answer is Reconciliation.UNKNOWN:
        return Outcome(
            claim.id,
            claim.execution_id,
            JobStatus.NEEDS_REVIEW,
            error_code=ErrorCode.RECONCILE_UNKNOWN,
            error=f"could not tell whether the side effect of the interrupted attempt happened "
            f"(previous error {claim.last_error_code})",
            event=EventKind.NEEDS_REVIEW,
            details=details,
        )
    if answer is not Reconciliation.NOT_DONE:
        raise TypeError(f"reconcile of {claim.type!r} must return a Reconciliation, not {answer!r}")
    return None


def decode_payload(claim: Claim, job_type: JobType) -> dict[str, object]:
    """Decode the stored payload and upcast it to the type's current version.

    Raises ``PermanentError(PAYLOAD_INVALID)``: a payload that cannot be decoded fails alone.
    """
    try:
        payload = _decode_json(claim.payload)
    except ValueError as exc:
        raise PermanentError(f"payload is not valid JSON: {exc}", code=ErrorCode.PAYLOAD_INVALID) from exc
    if not isinstance(payload, dict):
        raise PermanentError("payload is not a JSON object", code=ErrorCode.PAYLOAD_INVALID)
    version = claim.version
    while version < job_type.version:
        upcast = job_type.upcasters.get(version)
        if upcast is None:
            raise PermanentError(
                f"no upcaster from payload version {version} of {claim.type!r}",
                code=ErrorCode.PAYLOAD_INVALID,
            )
        try:
            payload = upcast(payload)
        except Exception as exc:
            # The stored payload does not fit the contract of its version: no retry will help.
            raise PermanentError(
                f"upcasting payload version {version} of {claim.type!r} failed: {type(exc).__name__}: {exc}",
                code=ErrorCode.PAYLOAD_INVALID,
            ) from exc
        version += 1
        if not isinstance(payload, dict):
            raise PermanentError(
                f"upcaster from version {version - 1} returned no JSON object", code=ErrorCode.PAYLOAD_INVALID
            )
    return payload


def failure_outcome(claim: Claim, job_type: JobType | None, exc: Exception) -> Outcome:
    """Decide retry / fail / skip for an exception, with the sanitized error to store."""
    decision = classify(exc)
    retry = decision.kind is OutcomeKind.RETRY and claim.attempt < claim.max_attempts
    details: dict[str, object] | None
    if decision.kind is OutcomeKind.SKIP:
        logger.info("job skipped id=%s type=%s code=%s", claim.id, claim.type, decision.code)
        status, event, delay, details = JobStatus.SKIPPED, EventKind.SKIPPED, 0.0, None
    elif decision.kind is OutcomeKind.CANCEL:
        logger.info("job cancelled id=%s type=%s", claim.id, claim.type)
        status, event, delay, details = JobStatus.CANCELLED, EventKind.CANCELLED, 0.0, None
    elif (
        decision.kind is OutcomeKind.RETRY
        and decision.code in AMBIGUOUS_CODES
        and job_type is not None
        and job_type.on_lost == "needs_review"
    ):
        # The call may have gone through before the error: retrying blindly could repeat an
        # irreversible effect.
        logger.warning("job needs review id=%s type=%s code=%s", claim.id, claim.type, decision.code)
        status, event, delay, details = JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW, 0.0, None
    elif retry and job_type is not None:
        delay = job_type.retry_policy.delay(claim.attempt, retry_after=decision.retry_after)
        logger.info(
            "job retry scheduled id=%s type=%s attempt=%s/%s code=%s in=%.1fs",
            claim.id, claim.type, claim.attempt, claim.max_attempts, decision.code, delay,
        )  # fmt: skip
        status, event, details = JobStatus.PENDING, EventKind.RETRY_SCHEDULED, {"retry_in": round(delay, 3)}
    else:
        reason = "permanent_error" if decision.kind is OutcomeKind.FAIL else "attempts_exhausted"
        logger.warning(
            "job failed id=%s type=%s attempt=%s/%s code=%s reason=%s",
            claim.id, claim.type, claim.attempt, claim.max_attempts, decision.code, reason,
        )  # fmt: skip
        status, event, delay, details = JobStatus.FAILED, EventKind.FAILED, 0.0, {"reason": reason}
    return Outcome(
        job_id=claim.id,
        execution_id=claim.execution_id,
        status=status,
        delay=delay,
        error_code=decision.code,
        error=describe(exc),
        event=event,
        details=json.dumps(details) if details is not None else None,
    )


def describe(exc: BaseException) -> str:
    """The sanitized, bounded text stored for an error: message first, then the traceback."""
    message = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(exc))
    return truncate(sanitize(f"{message}\n\n{trace}"), jobs_settings.MAX_ERROR_CHARS)


def _decode_json(value: object) -> object:
    # Django's psycopg backend leaves jsonb as text for JSONField to decode; a raw cursor sees that.
    return json.loads(value) if isinstance(value, str | bytes) else value


def _drop_broken_connections() -> None:
    # The equivalent of Django's per-request close_old_connections(): a handler that broke its
    # connection (or outlived CONN_MAX_AGE) must not pass it on to the next job of this thread.
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
