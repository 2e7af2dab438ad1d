"""The one decision of where a job goes after an execution, over its whole input space."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.backoff import Backoff
from django_jobs.decision import MAX_RETRY_DELAY, Happened, Situation, decide
from django_jobs.errors import AMBIGUOUS_CODES
from django_jobs.registry import ON_LOST_CHOICES
from django_jobs.states import EventKind, JobStatus, can_transition

BACKOFF = Backoff(base=2.0, cap=60.0, jitter=0.25)
VERDICTS = {
    Happened.COMPLETED: JobStatus.COMPLETED,
    Happened.RECONCILED_DONE: JobStatus.COMPLETED,
    Happened.SKIPPED: JobStatus.SKIPPED,
    Happened.CANCELLED: JobStatus.CANCELLED,
    Happened.PERMANENT: JobStatus.FAILED,
    Happened.RECONCILED_UNKNOWN: JobStatus.NEEDS_REVIEW,
}

situations = st.builds(
    Situation,
    happened=st.sampled_from(Happened),
    attempt=st.integers(min_value=1, max_value=10**6),
    max_attempts=st.integers(min_value=1, max_value=10**6),
    on_lost=st.sampled_from(ON_LOST_CHOICES),
    cancel_requested=st.booleans(),
    error_code=st.one_of(st.none(), st.sampled_from(sorted(AMBIGUOUS_CODES)), st.text(max_size=20)),
    retry_after=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    previous_error_code=st.sampled_from([None, "UNKNOWN", "LEASE_LOST", "DATABASE_UNAVAILABLE"]),
    on_lost_in_call=st.sampled_from([None, "reconcile", "needs_review"]),
    marked_call=st.sampled_from([None, False, True]),
)


def policy_when_ambiguous(s: Situation) -> str:
    """The type's on_lost; for a type that marks its calls, the marks' (no mark: retry)."""
    if s.on_lost_in_call is None:
        return s.on_lost
    return "retry" if s.marked_call is False else s.on_lost_in_call


@given(situation=situations, rng=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_every_decision_is_an_arrow_of_the_state_machine_and_keeps_every_rule(
    situation: Situation, rng: float
) -> None:
    d = decide(situation, lambda: BACKOFF, rng=lambda: rng)
    s = situation
    # An execution ends a running job: the result is always an arrow out of `running`.
    assert can_transition(JobStatus.RUNNING, d.status)
    assert math.isfinite(d.delay) and 0 <= d.delay <= MAX_RETRY_DELAY
    assert d.delay == 0 or d.status == JobStatus.PENDING
    assert d.event is not None or (d.status == JobStatus.COMPLETED and s.happened is Happened.COMPLETED)

    # 1. A verdict the handler gave is final.
    if s.happened in VERDICTS:
        assert d.status == VERDICTS[s.happened] and d.counted
        return
    # 2. A cancel request is never dropped.
    if s.cancel_requested:
        assert d.status == JobStatus.CANCELLED
    assert not (s.cancel_requested and d.status == JobStatus.PENDING)
    # 6. An outcome the database refused to store ends the job, never to run again blindly:
    #    cancelled on a request (above), parked when the type forbids a blind retry (what it
    #    reported is lost, its effect may have happened), else failed, whatever attempts remain.
    if s.happened is Happened.UNSTORABLE:
        parked = not s.cancel_requested and policy_when_ambiguous(s) == "needs_review"
        ended = JobStatus.CANCELLED if s.cancel_requested else JobStatus.FAILED
        assert d.counted and d.delay == 0
        assert d.status == (JobStatus.NEEDS_REVIEW if parked else ended)
        return
    # 7. A durable handler that slept or waits for a signal goes back to pending at its wake
    #    time or timeout, uncounted, whatever its attempts, its type's policy or an error code
    #    (it carries none): it did not fail. A cancel request (rule 2) cancels it.
    if s.happened is Happened.SUSPENDED:
        assert not d.counted
        if not s.cancel_requested:
            assert (d.status, d.event) == (JobStatus.PENDING, EventKind.SUSPENDED)
            wanted = s.retry_after if s.retry_after is not None and math.isfinite(s.retry_after) else 0.0
            assert d.delay == min(max(0.0, wanted), MAX_RETRY_DELAY)
        return
    # 3. Attempts count executions that started; what never started or was cut off by an
    #    outage goes back uncounted and at once.
    if s.happened is Happened.NOT_STARTED:
        assert not d.counted and d.status in (JobStatus.PENDING, JobStatus.CANCELLED) and d.delay == 0
        return
    cut_off_again = s.previous_error_code == "DATABASE_UNAVAILABLE"
    if s.happened is Happened.OUTAGE and d.status != JobStatus.NEEDS_REVIEW:
        # Uncounted, unless it was cut off the time before too (it may be the culprit).
        assert d.counted == cut_off_again and (d.delay == 0 or cut_off_again)
    # 4. Unsafe types are parked when the execution may have done its effect, never retried
    #    blindly, and nothing else is parked; for types that mark their external calls, an
    #    execution that marked none is never parked, and one that marked one is never retried
    #    blindly, whatever the type's on_lost.
    ambiguous = s.happened in (Happened.LOST, Happened.INTERRUPTED, Happened.OUTAGE) or (
        s.error_code in AMBIGUOUS_CODES
    )
    policy = policy_when_ambiguous(s)
    if not s.cancel_requested and ambiguous and policy == "needs_review":
        assert d.status == JobStatus.NEEDS_REVIEW
    if d.status == JobStatus.NEEDS_REVIEW:
        assert ambiguous and policy == "needs_review"
    if s.on_lost_in_call is not None and s.marked_call is False:
        assert d.status != JobStatus.NEEDS_REVIEW
    # 5. Retries are bounded by max_attempts; failure needs the attempts to be used up.
    if d.status == JobStatus.PENDING and d.counted:
        assert s.attempt < s.max_attempts
    if d.status == JobStatus.FAILED:
        assert s.attempt >= s.max_attempts and d.reason == "attempts_exhausted"


@pytest.mark.parametrize(
    ("situation", "status", "event", "counted"),
    [
        (Situation(Happened.COMPLETED, 1, 5), JobStatus.COMPLETED, None, True),
        (Situation(Happened.RETRYABLE, 1, 5), JobStatus.PENDING, EventKind.RETRY_SCHEDULED, True),
        (Situation(Happened.RETRYABLE, 5, 5), JobStatus.FAILED, EventKind.FAILED, True),
        (
            Situation(Happened.RETRYABLE, 1, 5, cancel_requested=True),
            JobStatus.CANCELLED,
            EventKind.CANCELLED,
            True,
        ),
        (Situation(Happened.LOST, 1, 5), JobStatus.PENDING, EventKind.RECOVERED, True),
        (
            Situation(Happened.SUSPENDED, 5, 5, retry_after=60.0),
            JobStatus.PENDING,
            EventKind.SUSPENDED,
            False,
        ),
        (Situation(Happened.LOST, 5, 5), JobStatus.FAILED, EventKind.RECOVERED, True),
        (
            Situation(Happened.LOST, 1, 5, "needs_review"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
            True,
        ),
        (
            Situation(Happened.LOST, 5, 5, "needs_review"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
            True,
        ),
        (Situation(Happened.INTERRUPTED, 1, 5), JobStatus.PENDING, EventKind.RELEASED, True),
        (Situation(Happened.INTERRUPTED, 3, 3), JobStatus.FAILED, EventKind.RELEASED, True),
        (Situation(Happened.NOT_STARTED, 5, 5), JobStatus.PENDING, EventKind.RELEASED, False),
        (Situation(Happened.NOT_STARTED, 1, 5, "needs_review"), JobStatus.PENDING, EventKind.RELEASED, False),
        (
            Situation(Happened.NOT_STARTED, 1, 5, cancel_requested=True),
            JobStatus.CANCELLED,
            EventKind.CANCELLED,
            False,
        ),
        (Situation(Happened.OUTAGE, 5, 5), JobStatus.PENDING, EventKind.RELEASED, False),
        (
            Situation(Happened.OUTAGE, 1, 5, "needs_review"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
            True,
        ),
        (
            Situation(Happened.OUTAGE, 1, 5, previous_error_code="DATABASE_UNAVAILABLE"),
            JobStatus.PENDING,
            EventKind.RETRY_SCHEDULED,
            True,
        ),
        (
            Situation(Happened.RETRYABLE, 1, 5, "needs_review", error_code="NETWORK_TIMEOUT"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
            True,
        ),
        (
            Situation(Happened.RETRYABLE, 1, 5, "needs_review", error_code="PROVIDER_5XX"),
            JobStatus.PENDING,
            EventKind.RETRY_SCHEDULED,
            True,
        ),
        (
            Situation(Happened.PERMANENT, 1, 5, cancel_requested=True),
            JobStatus.FAILED,
            EventKind.FAILED,
            True,
        ),
        (Situation(Happened.RECONCILED_DONE, 2, 5), JobStatus.COMPLETED, EventKind.RECONCILED, True),
        (Situation(Happened.UNSTORABLE, 1, 5), JobStatus.FAILED, EventKind.FAILED, True),
        (
            Situation(Happened.UNSTORABLE, 1, 5, cancel_requested=True),
            JobStatus.CANCELLED,
            EventKind.CANCELLED,
            True,
        ),
        (
            Situation(Happened.UNSTORABLE, 1, 5, "needs_review"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
            True,
        ),
        (
            Situation(
                Happened.UNSTORABLE, 1, 5, "needs_review", on_lost_in_call="needs_review", marked_call=False
            ),
            JobStatus.FAILED,
            EventKind.FAILED,
            True,
        ),
    ],
)
def test_decision_table(situation: Situation, status: str, event: str | None, counted: bool) -> None:
    d = decide(situation, lambda: BACKOFF, rng=lambda: 0.5)
    assert (d.status, d.event, d.counted) == (status, event, counted)


UNMARKED = {"on_lost_in_call": "needs_review", "marked_call": False}
MARKED = {"on_lost_in_call": "needs_review", "marked_call": True}
MARKED_RECONCILED = {"on_lost_in_call": "reconcile", "marked_call": True}


@pytest.mark.parametrize(
    ("situation", "status", "event"),
    [
        # Lost before any mark: a plain retry, even for an on_lost="needs_review" type.
        (Situation(Happened.LOST, 1, 5, "needs_review", **UNMARKED), JobStatus.PENDING, EventKind.RECOVERED),
        (Situation(Happened.LOST, 5, 5, "needs_review", **UNMARKED), JobStatus.FAILED, EventKind.RECOVERED),
        # Lost after a mark: parked, whatever on_lost says; or retried, to be reconciled first.
        (Situation(Happened.LOST, 1, 5, "retry", **MARKED), JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW),
        (
            Situation(Happened.LOST, 1, 5, "reconcile", **MARKED_RECONCILED),
            JobStatus.PENDING,
            EventKind.RECOVERED,
        ),
        # Nobody could tell whether it marked one (a killed child process): as if it had.
        (
            Situation(Happened.INTERRUPTED, 1, 5, "retry", on_lost_in_call="needs_review"),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
        ),
        # Ambiguous errors and outages: the same rule.
        (
            Situation(Happened.RETRYABLE, 1, 5, "needs_review", error_code="NETWORK_TIMEOUT", **UNMARKED),
            JobStatus.PENDING,
            EventKind.RETRY_SCHEDULED,
        ),
        (
            Situation(Happened.RETRYABLE, 1, 5, "retry", error_code="TIMEOUT", **MARKED),
            JobStatus.NEEDS_REVIEW,
            EventKind.NEEDS_REVIEW,
        ),
        (Situation(Happened.OUTAGE, 1, 5, "needs_review", **UNMARKED), JobStatus.PENDING, EventKind.RELEASED),
        (Situation(Happened.OUTAGE, 1, 5, "retry", **MARKED), JobStatus.NEEDS_REVIEW, EventKind.NEEDS_REVIEW),
        # A plain error after a mark is retried as before: a mark matters when the end is ambiguous.
        (
            Situation(Happened.RETRYABLE, 1, 5, "retry", error_code="PROVIDER_5XX", **MARKED),
            JobStatus.PENDING,
            EventKind.RETRY_SCHEDULED,
        ),
    ],
)
def test_decision_table_with_marks(situation: Situation, status: str, event: str | None) -> None:
    d = decide(situation, lambda: BACKOFF, rng=lambda: 0.5)
    assert (d.status, d.event) == (status, event)
    if status == JobStatus.NEEDS_REVIEW:
        assert d.reason == "it marked an external call: it may have reached the provider"


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (math.inf, MAX_RETRY_DELAY),
        (1e20, MAX_RETRY_DELAY),
        (math.nan, 2.0 * 0.875),
        (-5.0, 2.0 * 0.875),
        (30, 33.75),
    ],
)
def test_retry_after_is_clamped_to_a_storable_delay(retry_after: float, expected: float) -> None:
    """nan and negatives are no advice (the backoff applies); infinity is the longest delay."""
    d = decide(Situation(Happened.RETRYABLE, 1, 5, retry_after=retry_after), lambda: BACKOFF, rng=lambda: 0.5)
    assert d.status == JobStatus.PENDING and d.delay == pytest.approx(expected)


@given(situation=situations)
def test_the_success_path_the_outcome_writer_reads_is_what_decide_answers(situation: Situation) -> None:
    from django_jobs.runtime.outcomes import SUCCESS

    returned = dataclasses.replace(situation, happened=Happened.COMPLETED)
    assert decide(returned, lambda: BACKOFF) == SUCCESS
