"""Retry delays: exponential with a cap, plus jitter. Pure; randomness is injected.

The pure part is ``base × 2^(attempt-1)`` capped at ``cap``. Jitter then *subtracts* up to
``jitter`` of it, so that a crowd of jobs that failed together (a provider outage) comes back
spread over time instead of as a new thundering herd, while the cap still holds. A provider's
Retry-After is a floor: the job never runs before it, and jitter only adds to it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Random = Callable[[], float]  # returns a float in [0, 1)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry policy of a job type. Durations are in seconds."""

    base: float = 2.0
    cap: float = 3600.0
    #: Fraction of the delay that is randomised, in [0, 1].
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError("backoff base must be > 0 seconds")
        if self.cap < self.base:
            raise ValueError("backoff cap must be >= base")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be between 0 and 1")

    def pure_delay(self, attempt: int) -> float:
        """The delay before the retry that follows attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        # Cap the exponent first: 2.0 ** 2000 would overflow long before the cap applies.
        exponent = min(attempt - 1, 64)
        return min(self.cap, self.base * 2.0**exponent)

    def delay(self, attempt: int, *, retry_after: float | None = None, rng: Random = random.random) -> float:
        """The jittered delay, never above ``cap`` and never before ``retry_after``."""
        if retry_after is not None:
            return retry_after * (1.0 + self.jitter * rng())
        pure = self.pure_delay(attempt)
        return pure * (1.0 - self.jitter * rng())
