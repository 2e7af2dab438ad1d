"""Where a job goes after an execution ends, however it ended. Pure: no database, no clock.

Every writer that ends an execution asks :func:`decide`: the executor (the handler returned or
raised, or the jobs database cut it off), the worker (a prefetched job given back unstarted, an
outcome the database refused to store) and the reaper (a lease that expired). So the rules below
hold whoever ends the execution, and each is written once:

1. A verdict the handler gave is final: completed, skipped, cancelled, failed (permanent).
2. A cancel request is never dropped: an execution that ends without a verdict (an error, a
   lost lease, an interruption, a release) ends ``cancelled`` when cancellation was requested,
   instead of going back to ``pending`` to run again.
3. Attempts count executions that *started*. An execution that never started (a prefetched job
   given back) or that was stopped by an outage of the jobs database (not the handler's doing)
   is given back uncounted and at once — except that a job cut off mid-run whose type forbids
   a blind retry is parked for review (its effect may have happened), and that a job cut off
   twice in a row counts (it may be what breaks the connection).
4. An execution that may have done its side effect without saying so (lost, interrupted, an
   ambiguous error code) parks the job in ``needs_review`` when the type, *as stored on the job
   row*, says a blind retry is unsafe. This wins over ``failed``: a human must look. For a type
   that marks its external calls (``on_lost_in_call``), the marks decide instead of
   ``on_lost``: an execution that marked no call never reached the provider, and is not
   ambiguous at all; one that marked a call is ambiguous, and goes where ``on_lost_in_call``
   says (parked, or retried so that the next execution reconciles first).
5. Otherwise, retryable outcomes go back to ``pending`` after the backoff while attempts remain,
   and to ``failed`` once ``max_attempts`` executions started.
6. An execution whose outcome the database refused to store, even sanitised, ends the job; it
   never runs again blindly, since it would most likely report the same thing. What it reported
   is lost, so its effect may have happened: it ends ``cancelled`` when cancellation was
   requested (rule 2), parked when the type forbids a blind retry (rule 4), else ``failed``.
7. A durable handler that sleeps or waits for a signal goes back to ``pending``, due at its wake
   time or its timeout (the delay it asked for, clamped to a year), uncounted: it did not fail
   — unless cancellation was requested (rule 2).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from django_jobs.backoff import Backoff, Random
from django_jobs.errors import AMBIGUOUS_CODES, ErrorCode, OutcomeKind, classify
from django_jobs.states import EventKind, JobStatus

#: The longest retry delay any error may ask for (a year): ``Retry-After: inf`` is not a date.
MAX_RETRY_DELAY = 365 * 24 * 3600.0


class Happened(enum.Enum):
    """How an execution ended, as its writer saw it."""

    COMPLETED = "completed"  # the handler returned
    RECONCILED_DONE = "reconciled_done"  # reconcile said the previous attempt's effect happened
    RECONCILED_UNKNOWN = "reconciled_unknown"  # reconcile could not tell
    SKIPPED = "skipped"  # SkipJob
    CANCELLED = "cancelled"  # the handler stopped on a cancel request (JobCancelled)
    PERMANENT = "permanent"  # PermanentError: retrying cannot help
    RETRYABLE = "retryable"  # any other exception, a timeout, a handler killed at its deadline
    LOST = "lost"  # the lease expired: the execution is presumed dead (the reaper)
    INTERRUPTED = "interrupted"  # the worker stopped it mid-run and knows it stopped (shutdown)
    NOT_STARTED = "not_started"  # claimed, but the handler never began
    OUTAGE = "outage"  # the handler ran, and lost the jobs database under it
    UNSTORABLE = "unstorable"  # it ended, and the database refused to store its outcome
    SUSPENDED = "suspended"  # a durable handler sleeps or waits for a signal (runtime/durable.py)


#: Executions that ended without saying whether their side effect happened.
_AMBIGUOUS = frozenset({Happened.LOST, Happened.INTERRUPTED})
#: The reason of a job ended because its outcome could not be stored (rule 6).
OUTCOME_INVALID = "outcome_invalid"
#: Executions that are given back as if they never ran.
_UNCOUNTED = frozenset({Happened.NOT_STARTED, Happened.OUTAGE})
_UNSAFE = "a blind retry is unsafe for this type"
_MARKED = "it marked an external call: it may have reached the provider"


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything :func:`decide` looks at; each writer fills it from what it knows."""

    happened: Happened
    #: The number of this execution (1 on the first run): executions started before it, plus one.
    attempt: int
    max_attempts: int
    #: The type's policy for an execution that may have done its effect, from the job row.
    on_lost: str = "retry"
    cancel_requested: bool = False
    error_code: str | None = None
    #: The least delay the error asked for (Retry-After), in seconds; any float, even inf or nan.
    retry_after: float | None = None
    #: The error code the job carried before this execution (its last counted ending).
    previous_error_code: str | None = None
    #: For a type that marks its external calls: what an ambiguous end of an execution that
    #: marked one leads to ("reconcile" or "needs_review"); None for a type that marks none.
    on_lost_in_call: str | None = None
    #: Whether this execution marked an external call before it ended; None when nobody can
    #: tell (then it is taken to have marked one).
    marked_call: bool | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    status: JobStatus
    #: The event recorded with the arrow; None only for the plain success path.
    event: EventKind | None
    #: Whether this execution counts as an attempt (it started, and the failure was the job's).
    counted: bool
    #: Seconds before the job may be claimed again (pending only).
    delay: float = 0.0
    #: Why, in a few words, for the event and the logs.
    reason: str = ""


def decide(situation: Situation, backoff: Callable[[], Backoff], rng: Random = random.random) -> Decision:
    """The single rule for where a job goes after an execution; see the module's docstring.

    ``backoff`` returns the type's retry policy; it is asked only when a retry is decided (the
    plain success path of a million no-op jobs does not build a policy per job).
    """
    s = situation
    if s.happened is Happened.OUTAGE and s.previous_error_code == ErrorCode.DATABASE_UNAVAILABLE:
        # Cut off twice in a row: the handler may be what breaks the connection (a query that
        # kills its backend). It counts, so it cannot loop forever.
        s = dataclasses.replace(s, happened=Happened.RETRYABLE, error_code=ErrorCode.DATABASE_UNAVAILABLE)
    if s.happened in _UNCOUNTED:
        if s.cancel_requested:
            return Decision(JobStatus.CANCELLED, EventKind.CANCELLED, False, reason="cancel requested")
        if s.happened is Happened.OUTAGE and _when_ambiguous(s) == "needs_review":
            # Cut off mid-run: its effect may have happened, and the type forbids a blind retry.
            return Decision(JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW, True, reason=_why_unsafe(s))
        why = "never started" if s.happened is Happened.NOT_STARTED else "jobs database unreachable"
        return Decision(JobStatus.PENDING, EventKind.RELEASED, False, reason=why)
    if s.happened is Happened.COMPLETED:
        return Decision(JobStatus.COMPLETED, None, True)
    if s.happened is Happened.SUSPENDED:
        if s.cancel_requested:
            return Decision(JobStatus.CANCELLED, EventKind.CANCELLED, False, reason="cancel requested")
        delay = s.retry_after if s.retry_after is not None and math.isfinite(s.retry_after) else 0.0
        return Decision(
            JobStatus.PENDING, EventKind.SUSPENDED, False, min(max(0.0, delay), MAX_RETRY_DELAY), "suspended"
        )
    if s.happened is Happened.RECONCILED_DONE:
        return Decision(JobStatus.COMPLETED, EventKind.RECONCILED, True, reason="effect already done")
    if s.happened is Happened.SKIPPED:
        return Decision(JobStatus.SKIPPED, EventKind.SKIPPED, True, reason="skipped by the handler")
    if s.happened is Happened.CANCELLED:
        return Decision(JobStatus.CANCELLED, EventKind.CANCELLED, True, reason="cancelled by the handler")
    if s.happened is Happened.PERMANENT:
        return Decision(JobStatus.FAILED, EventKind.FAILED, True, reason="permanent_error")
    if s.happened is Happened.RECONCILED_UNKNOWN:
        return Decision(JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW, True, reason="reconcile unknown")
    if s.happened is Happened.UNSTORABLE:
        return _unstorable(s)
    # RETRYABLE, LOST, INTERRUPTED: the execution started and ended without a verdict.
    if s.cancel_requested:
        return Decision(JobStatus.CANCELLED, EventKind.CANCELLED, True, reason="cancel requested")
    ambiguous = s.happened in _AMBIGUOUS or s.error_code in AMBIGUOUS_CODES
    if ambiguous and _when_ambiguous(s) == "needs_review":
        return Decision(JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW, True, reason=_why_unsafe(s))
    event = {
        Happened.LOST: EventKind.RECOVERED,  # the reaper
        Happened.INTERRUPTED: EventKind.RELEASED,
        Happened.RETRYABLE: EventKind.RETRY_SCHEDULED,
    }[s.happened]
    if s.attempt >= s.max_attempts:
        if s.happened is Happened.RETRYABLE:
            event = EventKind.FAILED
        return Decision(JobStatus.FAILED, event, True, reason="attempts_exhausted")
    if s.happened is Happened.INTERRUPTED:
        # Stopped by a shutdown, not by its own failure: another worker may take it at once.
        return Decision(JobStatus.PENDING, event, True, reason="interrupted")
    return Decision(JobStatus.PENDING, event, True, retry_delay(s, backoff(), rng), reason="retry")


def _unstorable(s: Situation) -> Decision:
    """Rule 6: an outcome the database refused ends the job, whatever the attempts left."""
    if s.cancel_requested:
        return Decision(JobStatus.CANCELLED, EventKind.CANCELLED, True, reason="cancel requested")
    if _when_ambiguous(s) == "needs_review":
        return Decision(JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW, True, reason=_why_unsafe(s))
    return Decision(JobStatus.FAILED, EventKind.FAILED, True, reason=OUTCOME_INVALID)


def _when_ambiguous(s: Situation) -> str:
    """The policy for an ending that may have done the effect: the marks' when the type marks
    its external calls (no mark: a plain retry), else the type's ``on_lost``."""
    if s.on_lost_in_call is None:
        return s.on_lost
    return "retry" if s.marked_call is False else s.on_lost_in_call


def _why_unsafe(s: Situation) -> str:
    return _UNSAFE if s.on_lost_in_call is None else _MARKED


def retry_delay(situation: Situation, backoff: Backoff, rng: Random = random.random) -> float:
    """The backoff after ``situation.attempt``, with a Retry-After clamped to a sane range."""
    retry_after = situation.retry_after
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        # nan, negative or infinite: nan means "no advice", infinity means "as late as we allow".
        retry_after = MAX_RETRY_DELAY if retry_after == math.inf else None
    if retry_after is not None:
        retry_after = min(retry_after, MAX_RETRY_DELAY)
    delay = backoff.delay(max(1, situation.attempt), retry_after=retry_after, rng=rng)
    return min(max(0.0, delay), MAX_RETRY_DELAY)


def happened_for(exc: BaseException) -> tuple[Happened, str, float | None]:
    """How a handler's exception ended its execution: (happened, error code, retry_after)."""
    classification = classify(exc)
    happened = {
        OutcomeKind.SKIP: Happened.SKIPPED,
        OutcomeKind.CANCEL: Happened.CANCELLED,
        OutcomeKind.FAIL: Happened.PERMANENT,
        OutcomeKind.RETRY: Happened.RETRYABLE,
    }[classification.kind]
    return happened, classification.code, classification.retry_after
