"""What a worker says about itself: its id, the line it logs when it starts, and the live-worker
row its heartbeat keeps fresh (the dashboard's workers, and what diagnosis knows they run)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence

from django.conf import settings

from django_jobs import logs, transitions
from django_jobs.registry import JobType
from django_jobs.runtime.stats import WorkerStats

logger = logging.getLogger("django_jobs.worker")


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Presence:
    """``holding`` says how many jobs the worker holds (buffered or running); ``mode`` is how it
    runs, in words (``" in burst mode"``, ``" until settled"`` or nothing)."""

    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        pool: str,
        mode: str,
        job_types: dict[str, JobType],
        stats: WorkerStats,
        holding: Callable[[], int],
    ) -> None:
        self._worker_id = worker_id
        self._queues = list(queues)
        self._concurrency = concurrency
        self._pool = pool
        self._mode = mode
        self._job_types = job_types
        self._stats = stats
        self._holding = holding
        self._types_reported = False

    def log_start(self) -> None:
        types = sorted(self._job_types.values(), key=lambda t: t.name)
        listed = ", ".join(f"{t.name} v{t.version}" for t in types)
        logger.info(
            "worker started%s id=%s queues=%s concurrency=%s pool=%s types=%s: %s",
            self._mode, self._worker_id, ",".join(self._queues) or "all", self._concurrency, self._pool,
            len(types), listed or "none", extra=logs.worker_fields(self._worker_id),
        )  # fmt: skip
        changed = logs.changed_settings(getattr(settings, "DJANGO_JOBS", {}) or {})
        if changed:
            logger.info(
                "settings that differ from the defaults: %s", ", ".join(changed),
                extra=logs.worker_fields(self._worker_id),
            )  # fmt: skip

    def report_alive(self) -> None:
        """Write the live-worker row (the heartbeat calls this at each turn)."""
        # What this worker can run is said once, by its first report that gets through.
        job_types = None if self._types_reported else {n: t.version for n, t in self._job_types.items()}
        transitions.report_worker(
            job_types=job_types,
            worker_id=self._worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=",".join(self._queues),
            concurrency=self._concurrency,
            running=self._holding(),
            # dict.copy is one C call: safe while the main thread counts a new kind of outcome.
            processed=sum(dict.copy(self._stats.outcomes).values()),  # executions
        )
        self._types_reported = True
