"""Errors a handler raises to steer its job's outcome, errors ``enqueue()`` raises, and the
structured error codes stored with a job.

A handler's exception is classified into one :class:`Outcome` kind by :func:`classify`:
``RetryableError`` and any unexpected exception are retried with backoff (bounded by
``max_attempts``), ``RateLimitedError`` is retried no earlier than its ``retry_after``,
``PermanentError`` fails at once and ``SkipJob`` marks the job skipped.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError

#: Database errors that mean "cannot be reached right now" (down, restarting, network cut):
#: workers wait, reconnect and carry on. Any other database error is a bug or a missing
#: migration, and stops the worker loudly instead of retrying forever.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


class ErrorCode:
    """Stable codes stored in ``Job.last_error_code``; handlers may use their own strings too."""

    NETWORK_TIMEOUT = "NETWORK_TIMEOUT"
    NETWORK_ERROR = "NETWORK_ERROR"
    RATE_LIMITED = "RATE_LIMITED"
    AUTH_FAILED = "AUTH_FAILED"
    PAYLOAD_INVALID = "PAYLOAD_INVALID"
    ENTITY_NOT_FOUND = "ENTITY_NOT_FOUND"
    PROVIDER_5XX = "PROVIDER_5XX"
    PROVIDER_4XX = "PROVIDER_4XX"
    TIMEOUT = "TIMEOUT"
    LEASE_LOST = "LEASE_LOST"
    #: The worker was lost before it recorded that the (prefetched) execution started.
    LOST_UNSTARTED = "LOST_UNSTARTED"
    #: The worker was lost before the execution marked any external call (its type marks
    #: them all): it never reached the provider, so it is not ambiguous.
    LOST_BEFORE_CALL = "LOST_BEFORE_CALL"
    #: The execution could not reach the jobs database: not the handler's failure.
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    #: What the handler reported could not be stored even after sanitising it.
    OUTCOME_INVALID = "OUTCOME_INVALID"
    #: The handler returned a value that cannot be stored (not plain JSON, or too large).
    RESULT_INVALID = "RESULT_INVALID"
    #: The handler raised an exception that is not an ``Exception`` (SystemExit, …).
    BASE_EXCEPTION = "BASE_EXCEPTION"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"
    RECONCILE_UNKNOWN = "RECONCILE_UNKNOWN"
    #: Held by a restore hold and released: an execution after the restore point may have
    #: done its effect, and the restored database cannot say (``manage.py jobsrestore``).
    RESTORED = "RESTORED"
    #: A workflow's step that did not run: a job it waited for did not end as it needs.
    WORKFLOW_STOPPED = "WORKFLOW_STOPPED"
    #: Not started by its start-by deadline (``enqueue(start_by=…)``): ended ``cancelled``
    #: without running.
    EXPIRED = "EXPIRED"
    SKIPPED = "SKIPPED"
    UNKNOWN = "UNKNOWN"


#: The previous attempt ended without saying whether its side effect happened: lost (reaper),
#: past its deadline, cut off waiting for an answer, interrupted by a shutdown, or cut off from
#: the jobs database mid-run.
AMBIGUOUS_CODES = frozenset(
    {
        ErrorCode.LEASE_LOST,
        ErrorCode.TIMEOUT,
        ErrorCode.NETWORK_TIMEOUT,
        ErrorCode.INTERRUPTED,
        ErrorCode.DATABASE_UNAVAILABLE,
    }
)
#: The next execution of a job carrying one of these asks its type's ``reconcile`` first: the
#: ambiguous endings, and a job released from a restore hold.
RECONCILE_FIRST = AMBIGUOUS_CODES | {ErrorCode.RESTORED}


class JobError(Exception):
    """Base of the errors a handler raises on purpose. ``code`` is stored with the job."""

    default_code = ErrorCode.UNKNOWN

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class RetryableError(JobError):
    """A temporary failure: the job goes back to pending after a backoff delay."""


class PermanentError(JobError):
    """Retrying cannot help (bad payload, refused credentials): the job fails at once."""


class RateLimitedError(RetryableError):
    """The provider asked us to slow down: retry no earlier than ``retry_after`` seconds."""

    default_code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str = "", *, retry_after: float, code: str | None = None) -> None:
        if retry_after < 0:
            raise ValueError("retry_after must be >= 0 seconds")
        super().__init__(message, code=code)
        self.retry_after = float(retry_after)


class SkipJob(JobError):
    """The work lost its meaning (the entity is gone): the job ends ``skipped``, not failed."""

    default_code = ErrorCode.SKIPPED


class JobCancelled(JobError):
    """Raised by ``ctx.raise_if_cancelled()`` once cancellation was requested: the job ends
    ``cancelled``."""

    default_code = "CANCELLED"


class DeadlineExceeded(RetryableError):
    """Raised by the context once the execution ran past its type's ``timeout``: retried like
    any temporary failure, bounded by ``max_attempts``."""

    default_code = "TIMEOUT"


class InvalidCheckpoint(PermanentError):
    """Raised by ``ctx.save_checkpoint()`` for data that is not plain JSON or is larger than
    ``MAX_CHECKPOINT_BYTES``; nothing was written. Uncaught, the job fails: the same data would
    be refused on every attempt."""

    default_code = "CHECKPOINT_INVALID"


class InvalidProgress(PermanentError):
    """Raised by ``ctx.progress()`` for a ``done`` or ``total`` that is not a finite number;
    nothing was written."""

    default_code = "PROGRESS_INVALID"


class InvalidResult(PermanentError):
    """A handler returned a value that is not plain JSON or is larger than ``MAX_RESULT_BYTES``:
    the job fails, since the same value would be returned on every attempt."""

    default_code = "RESULT_INVALID"


class ResultNotJSON(InvalidResult, TypeError):
    """A task of Django's Tasks framework returned a value the framework cannot store as JSON.

    Also a ``TypeError``: that is what the framework's own backends raise for such a value, so
    code written for them catches it."""


class OutcomeKind(enum.Enum):
    RETRY = "retry"
    FAIL = "fail"
    SKIP = "skip"
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Classification:
    kind: OutcomeKind
    code: str
    #: Lower bound of the retry delay the error itself imposes (Retry-After), in seconds.
    retry_after: float | None = None


def classify(exc: BaseException) -> Classification:
    """Map a handler's exception to the outcome it asks for and its error code."""
    if isinstance(exc, SkipJob):
        return Classification(OutcomeKind.SKIP, exc.code)
    if isinstance(exc, JobCancelled):
        return Classification(OutcomeKind.CANCEL, exc.code)
    if isinstance(exc, PermanentError):
        return Classification(OutcomeKind.FAIL, exc.code)
    if isinstance(exc, RateLimitedError):
        return Classification(OutcomeKind.RETRY, exc.code, exc.retry_after)
    if isinstance(exc, JobError):
        return Classification(OutcomeKind.RETRY, exc.code)
    # Unexpected exceptions are retried: most are transient, and max_attempts bounds the rest.
    if isinstance(exc, TimeoutError):
        return Classification(OutcomeKind.RETRY, ErrorCode.NETWORK_TIMEOUT)
    if isinstance(exc, ConnectionError):
        return Classification(OutcomeKind.RETRY, ErrorCode.NETWORK_ERROR)
    return Classification(OutcomeKind.RETRY, ErrorCode.UNKNOWN)


# ---- errors raised by enqueue() -------------------------------------------------------------


class EnqueueError(ValueError):
    """Base of every error ``enqueue()`` raises; nothing was written when it is raised."""


class UnknownJobType(EnqueueError):
    """No handler is registered under that type name."""


class InvalidPayload(EnqueueError):
    """The payload is not a JSON object of plain JSON values."""


class PayloadTooLarge(InvalidPayload):
    """The encoded payload exceeds ``DJANGO_JOBS["MAX_PAYLOAD_BYTES"]``."""


class InvalidOption(EnqueueError):
    """An enqueue option (queue, priority, run_at, delay, max_attempts, unique_key) is invalid."""


class UnknownQueue(InvalidOption):
    """``DJANGO_JOBS["QUEUES"]`` is declared and does not name the queue: no worker is meant to
    serve it, so its jobs would wait forever."""


class InvalidWorkflow(EnqueueError):
    """A workflow that cannot be enqueued as written: an empty chain or group, a part used
    twice, a bad policy, more jobs than the limit, or a step whose unique key another job
    holds."""


def undeclared_queue(queue: str, declared: Iterable[str]) -> str:
    """Why ``queue`` is refused, naming the declared queues and the one most like it."""
    names = sorted(declared)
    close = difflib.get_close_matches(queue, names, n=1)
    hint = f": did you mean {close[0]!r}?" if close else ""
    return f"queue {queue!r} is not declared in DJANGO_JOBS['QUEUES'] ({', '.join(names)}){hint}"


# ---- the names of exception classes, as stored -----------------------------------------------

#: The package whose exported exception classes are stored by their public name.
_PACKAGE = "django_jobs"
#: The exception classes ``django_jobs`` exports (its ``__all__``; a test holds the two equal),
#: named here so that the rules stay pure: some are defined above the rules (``LeaseLost`` with
#: the context, ``ActionRefused`` with the transitions, ``InvalidFilter`` with the console).
PUBLIC_EXCEPTIONS = frozenset({
    "ActionRefused", "DeadlineExceeded", "EnqueueError", "InvalidCheckpoint", "InvalidFilter",
    "InvalidOption", "InvalidPayload", "InvalidProgress", "InvalidWorkflow", "JobCancelled",
    "JobNotFound", "LeaseLost", "PayloadTooLarge", "PermanentError", "RateLimitedError",
    "RetryableError", "SkipJob", "UnknownJobType", "UnknownQueue",
    # durable jobs (``durable_rules``)
    "InvalidSignal", "InvalidStep", "ReplayMismatch", "SignalTimeout", "UnknownSignalKey",
})  # fmt: skip


def class_path(cls: type) -> str:
    """The import path stored for an exception class (an event's ``exception``, an external
    call's end): ``django_jobs.LeaseLost`` for a class the package exports, whichever module
    defines it (modules move; the public name stays, and is what users import and compare),
    else its module's own (``builtins.ValueError``, ``myapp.errors.Oops``)."""
    return public_class_path(f"{cls.__module__}.{cls.__qualname__}")


def public_class_path(path: str) -> str:
    """A stored class path as it reads now: a class the package exports, stored under any
    module of the package (``django_jobs.context.LeaseLost`` before the layout moved,
    ``django_jobs.runtime.context.LeaseLost``, ``django_jobs.errors.PermanentError``), reads
    as its public name (``django_jobs.LeaseLost``), which imports; any other path is as
    stored."""
    module, _, name = path.rpartition(".")
    if module.startswith(_PACKAGE + ".") and name in PUBLIC_EXCEPTIONS:
        return f"{_PACKAGE}.{name}"
    return path


# ---- errors raised by what people do to jobs ------------------------------------------------


class JobNotFound(LookupError):
    """No job has this id (it never existed, or retention pruned it)."""
