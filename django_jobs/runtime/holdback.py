"""Holding back: a worker whose heartbeat has gone unanswered for as long as the shortest lease
claims nothing and starts nothing until the heartbeat gets through again (see docs/workers.md).

A worker cut off from the database by a network fault whose heartbeat connection is stuck would
otherwise run jobs whose leases nobody extends: other workers (or its own reaper) take them back,
and they run twice. The claim loop asks before each claim, and each slot before each job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django_jobs import logs
from django_jobs.conf import jobs_settings
from django_jobs.registry import JobType
from django_jobs.runtime.heartbeat import Heartbeat

logger = logging.getLogger("django_jobs.worker")


class HoldBack:
    def __init__(
        self,
        *,
        heartbeat: Heartbeat,
        job_types: dict[str, JobType],
        worker_id: str,
        answered_again: Callable[[], None],
    ) -> None:
        self._heartbeat = heartbeat
        self._worker_id = worker_id
        self._answered_again = answered_again  # wakes those who wait for the database
        self._lock = threading.Lock()
        # A heartbeat unanswered this long may have let the leases of this worker's jobs expire
        # (and be taken back): a job started now could not keep its lease either. Types that
        # do not beat live on their lease alone, whatever the heartbeat does.
        self.unanswered_limit = min(
            [t.lease for t in job_types.values() if t.heartbeat] or [jobs_settings.LEASE_TIMEOUT]
        )
        self.holding_back = False  # no job starts until the heartbeat is answered again

    def may_start_jobs(self) -> bool:
        """Whether the heartbeat reached the database within the shortest lease: if not, this
        worker claims nothing and starts nothing until it does."""
        unanswered = self._heartbeat.unanswered_for(time.monotonic())
        holding_back = unanswered >= self.unanswered_limit
        if holding_back != self.holding_back:
            self._note_holding_back(holding_back, unanswered)
        return not holding_back

    def _note_holding_back(self, holding_back: bool, unanswered: float) -> None:
        with self._lock:  # the claim loop and the slots ask: one of them says it
            if holding_back == self.holding_back:
                return
            self.holding_back = holding_back
        if holding_back:
            logger.warning(
                "heartbeat unanswered for %.1fs (the shortest lease is %gs): starting no job until "
                "it gets through", unanswered, self.unanswered_limit,
                extra=logs.worker_fields(self._worker_id),
            )  # fmt: skip
        else:
            logger.info("heartbeat answered again: starting jobs", extra=logs.worker_fields(self._worker_id))
            self._answered_again()
