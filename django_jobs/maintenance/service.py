"""What every maintenance service shares: one pass (``run_once()``), and a thread that repeats it.

A service is one role (recovery and retention in :mod:`~django_jobs.maintenance.reaper`, the
ticks of declared schedules in :mod:`~django_jobs.maintenance.periodic`) with a ``run_once()``
that does one pass and returns what it did, so that tests and commands call it directly, and a
:class:`Service` thread that runs it until told to stop.

Options: none of its own. Each service says how long to wait before its next pass
(:meth:`Service.next_wait`); ``hold_connection_for`` lets a service give back its connection
across a long wait.

Caveats:

- a pass that fails is logged, never raised: the thread must outlive a database outage. An
  unreachable database (``DATABASE_UNAVAILABLE``) is logged as a warning without a traceback and
  closes the connection, so that the next pass opens a fresh one; any other error is logged
  with its traceback. The service decides how long to wait after a failure (:meth:`_failed`);
- the thread's statements run under the worker's statement timeout
  (``connectivity.run_worker_statements``), and it closes its connections when it ends.
"""

from __future__ import annotations

import abc
import logging
import threading
from typing import ClassVar, Generic, TypeVar

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.runtime import connectivity

#: Rows per statement: bounded, so a mass recovery (a whole fleet died) never holds long locks.
BATCH = 500

Result = TypeVar("Result")


class Service(threading.Thread, Generic[Result], abc.ABC):
    """Runs :meth:`run_once` after each :meth:`next_wait` until ``stop`` is set."""

    logger: ClassVar[logging.Logger]
    #: Logged (with the error's class name) when a pass found the database unavailable.
    outage_message: ClassVar[str]
    #: Logged with the traceback when a pass failed otherwise.
    failure_message: ClassVar[str]
    #: Across a wait longer than this (seconds), the service holds no connection; None: it keeps it.
    hold_connection_for: ClassVar[float | None] = None

    def __init__(self, name: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self._stop_event = stop
        #: Passes that succeeded.
        self.passes = 0

    @abc.abstractmethod
    def run_once(self) -> Result:
        """One pass; says what it did. Raises what the pass raised."""

    @abc.abstractmethod
    def next_wait(self) -> float:
        """Seconds to wait before the next pass."""

    def run(self) -> None:
        connectivity.run_worker_statements()
        try:
            self.run_forever(self._stop_event)
        finally:
            connections.close_all()

    def run_forever(self, stop: threading.Event) -> None:
        """Wait, pass, and again, until ``stop`` is set (checked before each pass)."""
        while True:
            wait = self.next_wait()
            if self.hold_connection_for is not None and wait > self.hold_connection_for:
                connections[jobs_settings.DATABASE].close()
            if stop.wait(wait):
                return
            self.run_now()

    def run_now(self) -> bool:
        """One pass, on the calling thread; whether it succeeded. A failure is logged, never
        raised."""
        try:
            self._passed(self.run_once())
        except DATABASE_UNAVAILABLE as exc:
            self.logger.warning(self.outage_message, type(exc).__name__)
            connections[jobs_settings.DATABASE].close()
        except Exception:
            self.logger.exception(self.failure_message)
        else:
            return True
        self._failed()
        return False

    def _passed(self, result: Result) -> None:
        """Told what a pass did (it may raise: that pass is then logged as failed)."""
        self.passes += 1

    def _failed(self) -> None:
        """Told that a pass failed."""
