"""The worker's watch for a restored database: it looks before the first claim and at every
heartbeat report (so at once after a reconnect), remembers what it saw, and says whether the
jobs of external types must wait (a restore hold is open).

Until its first look gets through, it holds them too: a worker that starts on a restored database
must not run one before it has compared. See ``django_jobs.restoring`` for the signs, and
docs/operations/restore.md, for what the operator does.
"""

from __future__ import annotations

import logging
import time

from django_jobs import logs
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.registry import JobType
from django_jobs.restoring import Seen
from django_jobs.transitions import restore

logger = logging.getLogger("django_jobs.worker")

#: Seconds a "no hold is open" answer stands for the starts of jobs of external types. Asking
#: before every start would cost a query per job; within this, a declared hold acts as if it
#: had been declared a moment later.
RECHECK = 0.2


class RestoreWatch:
    def __init__(self, *, worker_id: str, job_types: dict[str, JobType]) -> None:
        self._worker_id = worker_id
        #: The types whose jobs wait while a hold is open.
        self.outside = frozenset(name for name, job_type in job_types.items() if job_type.acts_outside)
        self._seen: Seen | None = None  # what the last look saw; None before the first
        self._checked_at = -RECHECK  # when ``may_start`` last asked the database (monotonic)
        #: Whether a restore hold is open, as the last look found (True before the first look).
        self.held = True

    def holding(self) -> bool:
        """Whether the open hold keeps some of this worker's types waiting (the probes')."""
        return self.held and bool(self.outside)

    def may_start(self, job_type: str) -> bool:
        """Whether a claimed job of ``job_type`` may start now. For a type that acts outside,
        the database is asked too (one small read, at most every ``RECHECK`` seconds): a hold
        declared, or opened by another worker, since this worker's last look stops its jobs
        within that, not at the next look. An unreachable database stops them as well (they
        are given back unstarted)."""
        if job_type not in self.outside:
            return True
        if self.held:
            return False
        now = time.monotonic()
        if now - self._checked_at < RECHECK:
            return True
        try:
            open_now = restore.hold_open()
        except DATABASE_UNAVAILABLE:
            return False
        self._checked_at = now
        if open_now:
            self.held = True  # until the next look says otherwise
            fields = logs.worker_fields(self._worker_id)
            logger.warning("a restore hold is open: jobs of external types wait", extra=fields)
        return not open_now

    def run_once(self) -> restore.Look | None:
        """Look at the database's identity once. Raises what an unreachable database raises
        (the caller's turn is retried); the last answer stands meanwhile, as it does when the
        look is skipped (None: another worker froze inside its own look)."""
        found = restore.look(self._seen, self._worker_id)
        fields = logs.worker_fields(self._worker_id)
        if found is None:
            logger.info(
                "restore look skipped: another worker's look has held the record for %ss (a frozen "
                "worker?); the next heartbeat looks again", restore.LOOK_LOCK_WAIT, extra=fields,
            )  # fmt: skip
            return None
        if found.opened is not None and found.sign is not None:
            logger.error(
                "restore detected (%s): %s. Restore hold %s is open: jobs of types whose effects may "
                "be outside the database wait (%s); see manage.py jobsrestore",
                found.sign.kind, found.sign.evidence, found.opened, ", ".join(sorted(self.outside)) or "none",
                extra=fields,
            )  # fmt: skip
        elif found.sign is not None:
            logger.warning(
                "restore sign (%s): %s; a restore hold is open already", found.sign.kind, found.sign.evidence,
                extra=fields,
            )  # fmt: skip
        if found.held != self.held and self._seen is not None:
            if found.held:
                logger.warning("a restore hold is open: jobs of external types wait", extra=fields)
            else:
                logger.info("the restore hold was released: jobs of external types run again", extra=fields)
        elif found.held and self._seen is None and found.opened is None:
            logger.warning(
                "a restore hold is open: jobs of external types wait (%s); see manage.py jobsrestore",
                ", ".join(sorted(self.outside)) or "none", extra=fields,
            )  # fmt: skip
        self._seen = found.seen
        self.held = found.held
        return found
