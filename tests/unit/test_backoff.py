from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.backoff import Backoff

policies = st.builds(
    lambda base, factor, jitter: Backoff(base=base, cap=base * factor, jitter=jitter),
    base=st.floats(min_value=0.001, max_value=600),
    factor=st.floats(min_value=1, max_value=10_000),
    jitter=st.floats(min_value=0, max_value=1),
)
attempts = st.integers(min_value=1, max_value=10_000)
unit = st.floats(min_value=0, max_value=1, exclude_max=True)


@given(policies, attempts, unit)
def test_delay_is_within_jitter_of_the_capped_exponential(policy: Backoff, attempt: int, r: float) -> None:
    pure = min(policy.cap, policy.base * 2 ** min(attempt - 1, 64))
    delay = policy.delay(attempt, rng=lambda: r)
    assert pure * (1 - policy.jitter) - 1e-9 <= delay <= pure + 1e-9
    assert delay <= policy.cap + 1e-9


@given(policies, st.integers(min_value=1, max_value=200))
def test_pure_delay_doubles_until_the_cap(policy: Backoff, attempt: int) -> None:
    this, following = policy.pure_delay(attempt), policy.pure_delay(attempt + 1)
    assert following == pytest.approx(min(policy.cap, this * 2))


@given(policies, attempts, unit, st.floats(min_value=0, max_value=86_400))
def test_retry_after_is_a_floor(policy: Backoff, attempt: int, r: float, retry_after: float) -> None:
    delay = policy.delay(attempt, retry_after=retry_after, rng=lambda: r)
    assert retry_after <= delay <= retry_after * (1 + policy.jitter) + 1e-9


def test_jitter_spreads_a_crowd_of_retries() -> None:
    # 1,000 jobs that failed together must not come back together.
    import random

    rng = random.Random(7)
    policy = Backoff(base=10, cap=3600, jitter=0.25)
    delays = sorted(policy.delay(3, rng=rng.random) for _ in range(1000))
    assert delays[0] >= 30 and delays[-1] <= 40
    assert delays[-1] - delays[0] > 8  # spread over most of the 10 s window
    assert len({round(d, 2) for d in delays}) > 500


def test_no_jitter_gives_the_exact_schedule() -> None:
    policy = Backoff(base=2, cap=60, jitter=0)
    assert [policy.delay(a) for a in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert Backoff(base=1, cap=100, jitter=0).delay(10**9) == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base": 0}, "base"),
        ({"base": 10, "cap": 5}, "cap"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
    ],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)
