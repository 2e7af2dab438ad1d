"""Limits on when jobs may start: concurrency keys and rate limits. Pure: no database access.

Both are enforced by the claim statement (``transitions/execution.py``): a job held back by
its key or by its type's rate window is simply not claimed, so it uses no attempt and its row
is not written. What each costs is in docs/workers.md (*Concurrency keys and rate limits*).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The longest concurrency key, as the column stores it.
MAX_CONCURRENCY_KEY = 200
#: The highest concurrency limit per key.
MAX_CONCURRENCY_LIMIT = 10_000
#: The most starts one rate window may allow: the window keeps one timestamp per start.
MAX_RATE = 10_000

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` starts of a job type in any window of ``seconds``, across all workers."""

    count: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}s"


def parse_rate_limit(text: str) -> RateLimit:
    """``"20/s"``, ``"100/m"``, ``"1000/h"``, ``"5000/d"``, or with a length: ``"30/5m"``.

    Raises ``ValueError`` for anything else, a count of 0 or above ``MAX_RATE``.
    """
    match = _RATE_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"invalid rate_limit {text!r}: use COUNT/UNIT with UNIT s, m, h or d, e.g. '20/s' or '100/m'"
        )
    count, length, unit = int(match[1]), int(match[2] or 1), match[3]
    if not 1 <= count <= MAX_RATE:
        raise ValueError(f"invalid rate_limit {text!r}: the count must be between 1 and {MAX_RATE}")
    if length < 1:
        raise ValueError(f"invalid rate_limit {text!r}: the window must be at least 1{unit}")
    return RateLimit(count, float(length * _UNITS[unit]))


def concurrency_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a concurrency key, or None if it can (None itself means no key)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_CONCURRENCY_KEY:
        return f"concurrency_key must be a non-empty string of at most {MAX_CONCURRENCY_KEY} characters"
    if "\x00" in key:
        return "concurrency_key must not contain NUL characters"
    return None


def concurrency_limit_problem(limit: object) -> str | None:
    """Why ``limit`` cannot be a per-key concurrency limit, or None if it can."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        return f"concurrency_limit must be an integer between 1 and {MAX_CONCURRENCY_LIMIT}"
    return None
