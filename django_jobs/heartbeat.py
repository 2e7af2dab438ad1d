"""The heartbeat: extends the leases of this process's executions, one statement per beat.

A lease is extended only when it is due (``HEARTBEAT_INTERVAL`` since the last sign of life,
or half the lease if that is shorter), only for job types that beat, and never past the
execution's deadline: a job that runs forever loses its lease and is recovered, whatever its
heartbeat. A beat that finds a row no longer owned marks the lease lost, which the handler
learns from its context; a beat also brings back cancellation requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.context import Lease
from django_jobs.errors import DATABASE_UNAVAILABLE

logger = logging.getLogger("django_jobs.heartbeat")


class Heartbeat:
    """A daemon thread beating for the leases ``held()`` returns."""

    def __init__(self, held: Callable[[], list[Lease]], report: Callable[[], None] | None = None) -> None:
        self._held = held
        self._report = report
        self._last_report = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="django_jobs-heartbeat", daemon=True)
        self._warned_deadline: set[int] = set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def beat_once(self) -> int:
        """Extend every lease that is due now; return how many were extended."""
        now = time.monotonic()
        leases = self._held()
        for lease in leases:
            if lease.beats and lease.past_deadline(now) and id(lease) not in self._warned_deadline:
                self._warned_deadline.add(id(lease))
                logger.warning(
                    "job past its deadline id=%s execution=%s: its lease is no longer extended",
                    lease.job_id, lease.execution_id,
                )  # fmt: skip
        due = [lease for lease in leases if lease.beat_due(now)]
        if not due:
            return 0
        owned = transitions.heartbeat((lease.job_id, lease.execution_id, lease.duration) for lease in due)
        for lease in due:
            lease.record_beat(lease.job_id in owned, owned.get(lease.job_id, False), now)
            if lease.job_id not in owned:
                logger.warning("lease lost id=%s execution=%s", lease.job_id, lease.execution_id)
        return len(owned)

    def _tick(self) -> float:
        # Wake often enough to catch the shortest due lease, without spinning.
        shortest = min(
            [jobs_settings.HEARTBEAT_INTERVAL, *(lease.duration / 2 for lease in self._held() if lease.beats)]
        )
        return min(1.0, max(0.01, shortest / 4))

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._tick()):
                try:
                    self.beat_once()
                    if (
                        self._report
                        and time.monotonic() - self._last_report >= jobs_settings.HEARTBEAT_INTERVAL
                    ):
                        self._report()
                        self._last_report = time.monotonic()
                except DATABASE_UNAVAILABLE as exc:
                    # Leases keep their last known state: the database decides ownership when
                    # it answers again, and a beat that comes too late is reported as lost.
                    logger.warning("heartbeat failed, retrying: %s", type(exc).__name__)
                    connections[jobs_settings.DATABASE].close()
                except Exception:
                    # A dead heartbeat thread would let every lease of this process expire.
                    logger.exception("heartbeat error, beating on")
        finally:
            connections.close_all()
