"""The one "retry while the database is away" back-off of the worker.

Every part of the worker that meets an unreachable database — the claim loop, the outcome writer,
the final flushes of a shutdown, the claims an executor's refusal holds off — waits before trying
again, twice as long each time up to a ceiling, and starts over from the first wait once the
database answers. :class:`Outage` is that wait; :meth:`Outage.wait_out` is what a loop does when
its statement failed: say so, drop the broken connection, wait (cut short by an event).
"""

from __future__ import annotations

import logging
import threading

from django.db import connections

from django_jobs import logs
from django_jobs.conf import jobs_settings

logger = logging.getLogger("django_jobs.worker")

#: Reconnect back-off when the database is unreachable: first wait, and the longest.
DB_RETRY_FIRST, DB_RETRY_MAX = 0.1, 5.0
#: What the worker logs when a statement of its own met an unreachable database.
UNAVAILABLE = "database unavailable, retrying in %.1fs: %s"


class Outage:
    """How long to wait before the next try at an unreachable database.

    Each :meth:`failed` returns the wait for now and doubles the next one, up to ``longest``;
    :meth:`answered` starts over from ``first``. Not locked: each user owns one (or locks it).
    """

    def __init__(self, first: float = DB_RETRY_FIRST, longest: float = DB_RETRY_MAX) -> None:
        self.first = first
        self.longest = longest
        #: The wait the next failure gets.
        self.wait = first

    def failed(self) -> float:
        """A try failed: the seconds to wait now (the next failure waits twice as long)."""
        wait = self.wait
        self.wait = min(self.longest, wait * 2)
        return wait

    def answered(self) -> None:
        """The database answered: the next outage starts from the first wait."""
        self.wait = self.first

    def wait_out(
        self, exc: BaseException, *, until: threading.Event, worker_id: str, message: str = UNAVAILABLE
    ) -> float:
        """Log the failure (``message``, given the wait and the error's name), close the broken
        connection, and wait until ``until`` is set, at most the back-off; returns the seconds
        it was allowed to wait."""
        wait = self.failed()
        logger.warning(message, wait, type(exc).__name__, extra=logs.worker_fields(worker_id))
        connections[jobs_settings.DATABASE].close()
        until.wait(wait)
        return wait
