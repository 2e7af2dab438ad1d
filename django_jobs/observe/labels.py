"""What the series of this package are called, and the values their labels may take.

Every label a worker's counters carry holds at most ``METRICS_MAX_LABEL_VALUES`` distinct
values (:class:`LabelValues`); later values are counted as :data:`OTHER`. Error codes and
queues are strings that handlers and callers choose: a handler that put a job's id in its code
would otherwise make a series per job, in every worker, for as long as it runs.
"""

from __future__ import annotations

import threading

#: The prefix of every metric's name.
PREFIX = "django_jobs"

#: The value a label takes in place of any past the first ``METRICS_MAX_LABEL_VALUES``.
OTHER = "other"


class LabelValues:
    """The distinct values one label has taken, up to ``cap``: any later one is :data:`OTHER`.

    The first values seen keep their own series for the life of the process, so a series
    never changes its meaning between scrapes.
    """

    __slots__ = ("_lock", "cap", "seen")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def fold(self, value: str) -> str:
        if value in self.seen:  # the common case, without the lock
            return value
        if len(self.seen) >= self.cap:  # full: it never shrinks
            return OTHER
        with self._lock:
            if value in self.seen:
                return value
            if len(self.seen) >= self.cap:
                return OTHER
            self.seen.add(value)
            return value
