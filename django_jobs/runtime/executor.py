"""Runs ONE claimed job and says how it ended. No loop, no signals, no status writes.

Whatever the handler does, :func:`execute` returns a :class:`Finished`: it catches every
exception, ``BaseException`` included (``SystemExit``, ``KeyboardInterrupt`` raised by a
library, ``asyncio.CancelledError``), and even an error raised while describing the error. An
``async def`` handler (or one that returns an awaitable) is run to completion on an event loop.

The steps, in order: the handler's connection is checked (``runtime/handler_connections.py``),
the execution's span opened when tracing is on (``observe/tracing.py``), the payload decoded
and upcast (``runtime/payloads.py``), the ``JobContext`` built, an ambiguous previous attempt
reconciled when the type can say what it did, the handler called, its end described as a
:class:`Finished` (and recorded on the span), and the connections left as the next job expects.

The handler runs on the calling thread's own database connection, in autocommit mode: never
inside a transaction opened for the claim, which committed before the job was handed over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_jobs import logs
from django_jobs.decision import Happened, happened_for
from django_jobs.errors import DATABASE_UNAVAILABLE, RECONCILE_FIRST, ErrorCode, PermanentError, class_path
from django_jobs.observe import tracing
from django_jobs.registry import JobType, Reconciliation, registry
from django_jobs.results import encode_result
from django_jobs.runtime import handler_connections, payloads
from django_jobs.runtime.context import JobContext, LeaseLost
from django_jobs.runtime.durable import Suspended
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.side_writes import SideWriter
from django_jobs.sanitize import describe
from django_jobs.transitions import Claim

logger = logging.getLogger("django_jobs.executor")

_UNKNOWN_AFTER_RESTORE = (
    "restored from backup: reconcile could not tell whether an execution after the restore point "
    "did the side effect"
)


@dataclass(frozen=True, slots=True)
class Finished:
    """How one execution ended, before any decision about the job."""

    claim: Claim
    #: None when the lease was lost: the job belongs to another execution, nothing is written;
    #: None too, with code ``EXPIRED``, when the start path ended the job past its deadline.
    happened: Happened | None
    error_code: str | None = None
    error: str | None = None  # sanitized and bounded
    retry_after: float | None = None
    details: str | None = None  # JSON text for the event (reconciliation)
    #: Seconds from the start of the handler to its end; None if it never started.
    ran_for: float | None = None
    #: What the handler returned, as JSON text (None when it returned None or did not return).
    result: str | None = None
    #: The import path of the exception that ended the execution, when one did.
    exception: str | None = None
    #: Whether the execution marked an external call (``ctx.external_call``) before it ended;
    #: None when nobody can tell (a child process killed by its worker, a failure of ours).
    marked_call: bool | None = False
    #: A durable handler parked in ``ctx.wait_for``: the signal it waits for (SUSPENDED only).
    signal: str | None = None


def execute(
    claim: Claim,
    lease: Lease,
    side_writer: SideWriter | None = None,
    on_start: Callable[[Claim], None] | None = None,
) -> Finished:
    """Run the handler of ``claim`` and say how it ended; never raises.

    ``lease`` is shared with the worker's heartbeat: through it the handler learns of a lost
    lease, a cancellation request or its deadline. When the previous attempt may have done its
    side effect (``RECONCILE_FIRST``: an ambiguous ending, or a restore) and the type can
    ``reconcile``, it is asked first.
    ``on_start`` is called just before the handler, once its connection is known to work.
    """
    if not handler_connections.jobs_connection_open():
        # Refused before the handler began (a crowded or restarting database): given back
        # uncounted; the code tells the worker to back off.
        return Finished(claim, Happened.NOT_STARTED, ErrorCode.DATABASE_UNAVAILABLE)
    try:
        if on_start is not None:
            on_start(claim)
        return run(claim, lease, side_writer)
    finally:
        handler_connections.reset_connections()


def run(
    claim: Claim, lease: Lease, side_writer: SideWriter | None = None, *, reraise_base: bool = False
) -> Finished:
    """Run the handler of ``claim`` on the calling thread's connections, as they are, and say
    how it ended.

    Raises nothing, unless ``reraise_base``: then a ``BaseException`` that is not an
    ``Exception`` (``SystemExit``, ``KeyboardInterrupt``) propagates as it would from any
    function, and the execution is left to its lease, as after a crash.
    """
    started = time.perf_counter()
    lease.start()
    with tracing.execution(claim) as span:  # None unless tracing is on
        try:
            finished = _run(claim, lease, side_writer, started)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, CancelledError: still an outcome
            if reraise_base and not isinstance(exc, Exception):
                raise
            finished = _failure(claim, exc, started, lease.worker_id)
        finally:
            lease.done = True
        if finished.happened is not None and lease.lost:
            finished = Finished(claim, None, ran_for=finished.ran_for)
        if span is not None:
            tracing.execution_ended(
                span, finished.happened, finished.error_code, finished.error, finished.exception
            )
    if finished.happened is None:
        # The job was taken over: its state belongs to the new owner, and the guarded write
        # would be refused anyway. Worded as the writer words a refused write: either way the
        # outcome of this execution is dropped, and an operator greps for one line.
        logger.warning(
            "outcome discarded, lease lost id=%s execution=%s type=%s",
            claim.id, claim.execution_id, claim.type,
            extra=logs.claim_fields(claim, lease.worker_id),
        )  # fmt: skip
        return finished
    return dataclasses.replace(finished, marked_call=True) if lease.marked_call else finished


def context_for(
    claim: Claim, lease: Lease, job_type: JobType | None, side_writer: SideWriter | None = None
) -> JobContext:
    """The ``JobContext`` a handler of ``claim``'s execution is called with."""
    return JobContext(
        job_id=claim.id,
        type=claim.type,
        queue=claim.queue,
        attempt=claim.attempt,
        max_attempts=claim.max_attempts,
        execution_id=claim.execution_id,
        unique_key=claim.unique_key,
        checkpoint=payloads.decode_json(claim.checkpoint),
        lease=lease,
        side_writer=side_writer,
        external_calls=job_type.external_calls if job_type is not None else (),
    )


def _run(claim: Claim, lease: Lease, side_writer: SideWriter | None, started: float) -> Finished:
    job_type = registry.get(claim.type)
    if job_type is None:  # the claim filters on known types; a test may unregister one
        raise PermanentError(f"no handler for job type {claim.type!r}", code=ErrorCode.PAYLOAD_INVALID)
    payload = payloads.decode_payload(claim, job_type)
    ctx = context_for(claim, lease, job_type, side_writer)
    reconciled = _reconcile(claim, job_type, ctx, payload, started, lease.worker_id)
    if reconciled is not None:
        return reconciled
    try:
        value = call(job_type.handler, ctx, payload)
    except Suspended as suspended:  # a durable handler sleeps or waits: not an error
        return Finished(
            claim, Happened.SUSPENDED, retry_after=suspended.delay, details=json.dumps(suspended.details),
            ran_for=time.perf_counter() - started, signal=suspended.signal,
        )  # fmt: skip
    # A value that cannot be stored raises InvalidResult here: the job fails, the worker goes on.
    result = encode_result(value)
    return Finished(claim, Happened.COMPLETED, ran_for=time.perf_counter() - started, result=result)


def call(function: Callable[..., Any], *args: Any) -> Any:
    """Call ``function``; if it is a coroutine function or returns an awaitable, await it."""
    result = function(*args)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _failure(claim: Claim, exc: BaseException, started: float, worker_id: str | None) -> Finished:
    ran_for = time.perf_counter() - started
    if isinstance(exc, LeaseLost):
        return Finished(claim, None, ran_for=ran_for)
    if _caused_by_unreachable_database(exc) and not handler_connections.jobs_connection_sound():
        logger.warning(
            "connection to the jobs database lost during job id=%s type=%s: not counted as its failure",
            claim.id, claim.type, extra=logs.claim_fields(claim, worker_id),
        )  # fmt: skip
        code = ErrorCode.DATABASE_UNAVAILABLE
        return Finished(claim, Happened.OUTAGE, code, describe(exc), ran_for=ran_for)
    try:
        happened, code, retry_after = happened_for(exc)
    except BaseException:  # an exception whose attributes raise is still an outcome
        happened, code, retry_after = Happened.RETRYABLE, ErrorCode.UNKNOWN, None
    if not isinstance(exc, Exception):
        code = ErrorCode.BASE_EXCEPTION
    return Finished(
        claim, happened, code, describe(exc), retry_after, ran_for=ran_for, exception=exception_path(exc)
    )


def failed_outside_the_handler(claim: Claim, exc: BaseException) -> Finished:
    """How an execution ended that raised around its handler, not in it (``execute()`` never
    raises; a bug of ours would): a retryable ``UNKNOWN``, whether the handler ran unknown. Its
    text is stored as a handler's error is, sanitized: a bare ``repr`` may hold a secret."""
    return Finished(
        claim, Happened.RETRYABLE, ErrorCode.UNKNOWN, describe(exc), exception=exception_path(exc),
        marked_call=None,
    )  # fmt: skip


def exception_path(exc: BaseException) -> str:
    """The import path of ``exc``'s class (``builtins.ValueError``, ``myapp.errors.Oops``;
    ``django_jobs.PermanentError`` for a class the package exports)."""
    return class_path(type(exc))


def _caused_by_unreachable_database(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # a bounded walk: a chain may loop
        if seen is None:
            return False
        if isinstance(seen, DATABASE_UNAVAILABLE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reconcile(
    claim: Claim,
    job_type: JobType,
    ctx: JobContext,
    payload: dict[str, Any],
    started: float,
    worker_id: str | None,
) -> Finished | None:
    """Ask the type whether an ambiguous previous attempt did its effect; None: run the handler."""
    if job_type.reconcile is None or claim.last_error_code not in RECONCILE_FIRST:
        return None
    answer = call(job_type.reconcile, ctx, payload)
    if not isinstance(answer, Reconciliation):
        raise TypeError(f"reconcile of {claim.type!r} must return a Reconciliation, not {answer!r}")
    logger.info(
        "job reconciled id=%s type=%s answer=%s", claim.id, claim.type, answer.value,
        extra=logs.claim_fields(claim, worker_id),
    )  # fmt: skip
    details = json.dumps({"answer": answer.value, "previous_error": claim.last_error_code})
    ran_for = time.perf_counter() - started
    if answer is Reconciliation.DONE:
        return Finished(claim, Happened.RECONCILED_DONE, details=details, ran_for=ran_for)
    if answer is Reconciliation.UNKNOWN:
        return Finished(
            claim,
            Happened.RECONCILED_UNKNOWN,
            ErrorCode.RECONCILE_UNKNOWN,
            _UNKNOWN_AFTER_RESTORE
            if claim.last_error_code == ErrorCode.RESTORED
            else "could not tell whether the side effect of the interrupted attempt happened "
            f"(previous error {claim.last_error_code})",
            details=details,
            ran_for=ran_for,
        )
    return None
