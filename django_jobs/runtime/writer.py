"""The outcome writer: what the slots finished waits here, and is written in batches (one
statement each, through :mod:`django_jobs.runtime.outcomes`) on a thread and connection of its
own, so that the next claim, the jobs running and the last batch's outcomes overlap.

A batch is due once it is ``batch_size`` long, once no job runs any more (nothing else would
fill it), or ``OUTCOME_FLUSH_INTERVAL`` after its first outcome arrived. One statement writes at
most :data:`BACKLOG_BATCHES` batches; while that many wait, the worker claims nothing (see
:attr:`OutcomeWriter.holds_back_claims`). While the database is away, outcomes stay in memory, in
order, and the writer waits out an :class:`Outage`; it tries again at once when the heartbeat
gets through (:meth:`OutcomeWriter.database_answered`), before the leases of the executions it
holds run out. Shutdown writes what is left, patiently
(:meth:`OutcomeWriter.flush_patiently`), then closes: an execution that ends later writes its own
outcome (:meth:`OutcomeWriter.write_late`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

from django.db import Error as DatabaseError  # every database error, InterfaceError included
from django.db import connections

from django_jobs import logs
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.observe.metrics import Recorder
from django_jobs.runtime import connectivity, outcomes
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.outage import Outage
from django_jobs.runtime.pool import ExecutorPool
from django_jobs.runtime.stats import WorkerStats

logger = logging.getLogger("django_jobs.worker")

#: How many batches of outcomes may wait before the worker stops claiming, and the most one
#: statement writes. A writer that falls behind (a slow disk, a lock, vacuum) would otherwise
#: see its jobs finish faster than it writes them: every unwritten outcome is a job still
#: ``running`` in the table, its lease running out, and one ever larger statement to write.
BACKLOG_BATCHES = 4


@dataclass(frozen=True)
class WriterTurn:
    """What one turn of the writer did: how many outcomes it wrote, or, if the database was
    away, how long it waits before the next try (its outcomes kept for it)."""

    written: int = 0
    retry_in: float | None = None


class OutcomeWriter:
    def __init__(
        self,
        *,
        pool: ExecutorPool,
        stats: WorkerStats,
        worker_id: str,
        batch_size: int,
        wake: threading.Event,
        metrics: Recorder | None = None,
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._worker_id = worker_id
        self._batch_size = batch_size
        self._backlog = BACKLOG_BATCHES * batch_size
        self._wake = wake  # the claim loop's: it may be waiting for the last outcome
        self._metrics = metrics
        self._lock = threading.Lock()
        self._finished: list[Finished] = []  # waiting to be written
        self._oldest_finished_at: float | None = None
        self._writing = 0  # batches of outcomes being written, under _lock
        self._outcomes_waiting = threading.Event()  # wakes the writer's thread
        self._done = threading.Event()  # the writer's thread is to stop
        self._closed = threading.Event()  # shutdown is over: nobody flushes outcomes any more
        # The database answered again (the heartbeat got through after a cut): a writer waiting
        # out its back-off retries at once.
        self._answered = threading.Event()
        self._outage = Outage()
        #: Its last write failed: claims wait while it holds outcomes.
        self.in_outage = False
        self._thread = threading.Thread(target=self._run, name="django_jobs-writer", daemon=True)

    # ---- what the others ask -------------------------------------------------------------------

    @property
    def unwritten(self) -> bool:
        """Outcomes wait, or a batch is being written (a retry it writes may be claimable at once)."""
        with self._lock:
            return bool(self._finished or self._writing)

    @property
    def holds_back_claims(self) -> bool:
        """What this worker ran is still unwritten, for an unreachable database or as much of it
        as :data:`BACKLOG_BATCHES` batches: a job claimed now would finish into the same
        queue, and its lease would run out waiting (then it runs again elsewhere)."""
        waiting = len(self._finished)
        return bool(waiting) and (self.in_outage or waiting >= self._backlog)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def add(self, finished: list[Finished]) -> bool:
        """Queue outcomes to be written; False once the writer is closed (nobody writes)."""
        with self._lock:
            if self._closed.is_set():
                return False
            first = not self._finished
            if first:
                self._oldest_finished_at = time.monotonic()
            self._finished.extend(finished)
            many = len(self._finished) >= self._batch_size
        if first or many or not self._pool.any_running():
            self._outcomes_waiting.set()
        return True

    def database_answered(self) -> None:
        """The heartbeat got through: a writer waiting out an outage tries again now."""
        self._answered.set()

    # ---- writing -------------------------------------------------------------------------------

    def flush(self, force: bool) -> int:
        """Write the finished executions while it is time (or all of them, ``force``), at most
        :data:`BACKLOG_BATCHES` batches a statement; returns how many.

        Raises what the database raised; the batch is then kept, ahead of what came since.
        """
        written = 0
        while True:
            held_back = self.holds_back_claims
            batch = self._take_due(force)
            if not batch:
                return written
            written += self._write(batch)
            if held_back or not self._pool.any_running():
                self._wake.set()  # the claim loop may be waiting for these outcomes to be written

    def _take_due(self, force: bool) -> list[Finished]:
        with self._lock:
            if not self._finished:
                return []
            _, running, _ = self._pool.counts()
            due = (
                force
                or len(self._finished) >= self._batch_size
                or not running
                or time.monotonic() - (self._oldest_finished_at or 0) >= jobs_settings.OUTCOME_FLUSH_INTERVAL
            )
            if not due:
                return []
            batch, self._finished = self._finished[: self._backlog], self._finished[self._backlog :]
            # What stays is due at once: it waited as long as the batch it came with.
            self._oldest_finished_at = self._oldest_finished_at if self._finished else None
            self._writing += 1
            return batch

    def _write(self, batch: list[Finished]) -> int:
        try:
            written = outcomes.record(batch, worker_id=self._worker_id)  # job id → the outcome written
        except DatabaseError:  # only the unreachable database gets here: keep them for later
            with self._lock:
                self._finished[:0] = batch
                self._oldest_finished_at = self._oldest_finished_at or time.monotonic()
            raise
        finally:
            with self._lock:
                self._writing -= 1
        outcomes.announce(batch, written, self._worker_id)
        recorder = self._metrics
        for finished in batch:
            outcome = written.get(finished.claim.id)
            if recorder is not None:
                recorder.on_finished(finished, outcome)
            if outcome is not None:
                if finished.happened is Happened.NOT_STARTED:
                    self._stats.released += 1
                else:
                    self._stats.outcomes[str(outcome.status)] += 1
            else:
                self._stats.lost += 1
                logger.warning(
                    "outcome discarded, lease lost id=%s execution=%s",
                    finished.claim.id, finished.claim.execution_id,
                    extra=logs.claim_fields(finished.claim, self._worker_id),
                )  # fmt: skip
        self._stats.last_outcome_at = time.monotonic()
        return len(batch)

    def run_once(self) -> WriterTurn:
        """One turn of the writer: write what is due. An unreachable database is logged and its
        connection closed; the outcomes stay, and the turn says how long to wait."""
        try:
            wrote = self.flush(force=False)
        except DATABASE_UNAVAILABLE as exc:
            self.in_outage = True
            wait = self._outage.failed()
            logger.warning(
                "database unavailable for outcomes, retrying in %.1fs: %s",
                wait,
                type(exc).__name__,
                extra=logs.worker_fields(self._worker_id),
            )
            connections[jobs_settings.DATABASE].close()
            return WriterTurn(retry_in=wait)
        self._outage.answered()
        self.in_outage = False
        return WriterTurn(written=wrote)

    def _run(self) -> None:
        """The writer's thread: writes finished executions in batches until shutdown (which
        writes what is left), and waits out an unreachable database."""
        connectivity.run_worker_statements()
        try:
            while not self._done.is_set():
                with self._lock:
                    waiting = bool(self._finished)
                # Nothing to write: sleep until the first outcome arrives (it sets the event).
                self._outcomes_waiting.wait(jobs_settings.OUTCOME_FLUSH_INTERVAL if waiting else None)
                self._outcomes_waiting.clear()
                turn = self.run_once()
                if turn.retry_in is not None:
                    self._answered.wait(turn.retry_in)
                    self._answered.clear()
        except Exception:  # a bug of ours: the claim loop's and the final flushes still write them
            logger.exception("the outcome writer stopped", extra=logs.worker_fields(self._worker_id))
        finally:
            connections.close_all()

    def flush_patiently(self, until: float | None, stopping: threading.Event) -> None:
        """Write buffered outcomes, retrying while the database is away until ``until``."""
        outage = Outage()
        while True:
            try:
                self.flush(force=True)
                return
            except DATABASE_UNAVAILABLE as exc:
                if until is None or time.monotonic() >= until:
                    logger.error(
                        "could not write %s outcome(s); the reaper will recover those jobs",
                        len(self._finished),
                        extra=logs.jobs_fields((f.claim.id for f in self._finished), self._worker_id),
                    )
                    return
                outage.wait_out(exc, until=stopping, worker_id=self._worker_id)
                time.sleep(outage.wait)

    def write_late(self, finished: Finished) -> None:
        """Write the outcome of an execution that ended after the writer closed (one the worker
        stopped waiting for): the guarded write lands only if its lease was not taken over."""
        with contextlib.suppress(DatabaseError):
            written = outcomes.record([finished], worker_id=self._worker_id)
            outcomes.announce([finished], written, self._worker_id)
            self._stats.outcomes.update(str(o.status) for o in written.values())

    # ---- its life ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop the thread: it writes no more batches of its own (a batch it is writing against
        an unreachable database does not hold this up past ``timeout``)."""
        self._done.set()
        self._outcomes_waiting.set()
        self._answered.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def close(self) -> None:
        """No more outcomes are queued: :meth:`add` refuses them from now on."""
        with self._lock:
            self._closed.set()
