"""The worker: claims jobs in batches, hands them to executor threads, writes outcomes in
batches, and shuts down without leaving a job ``running`` under its name.

Threads and their roles:
- the *main* thread claims (one statement per batch), writes outcomes (one statement per
  batch) and handles signals; it owns one database connection;
- *N executor* threads each run one job at a time on their own database connection.

A claimed job is either executing on a thread or waiting in the local buffer. The worker claims
beyond its free threads only while jobs are short (see ``PREFETCH_SECONDS``), so a burst of
no-op jobs costs two statements per batch while a long job is never hoarded behind another.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from django.db import Error as DatabaseError  # every database error, InterfaceError included
from django.db import connections

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.context import Lease
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.executor import execute
from django_jobs.heartbeat import Heartbeat
from django_jobs.reaper import ReaperLoop
from django_jobs.registry import registry
from django_jobs.states import JobStatus
from django_jobs.transitions import Claim, ClaimStatement, Outcome, Release

logger = logging.getLogger("django_jobs.worker")

#: Reconnect back-off when the database is unreachable: first wait, and the longest.
_DB_RETRY_FIRST, _DB_RETRY_MAX = 0.1, 5.0


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerStats:
    """Counts and claim timings, for the exit summary and the benchmark."""

    claims: int = 0
    claimed: int = 0
    #: Durations of the last claims that found work (empty polls are not timed).
    claim_seconds: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=100_000))
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    released: int = 0
    first_claim_at: float | None = None
    last_outcome_at: float | None = None

    def summary(self) -> dict[str, Any]:
        processed = sum(self.outcomes.values())
        busy = (self.last_outcome_at or 0) - (self.first_claim_at or 0)
        timings = sorted(self.claim_seconds)

        def pct(p: float) -> float | None:
            if not timings:
                return None
            return round(1000 * timings[min(len(timings) - 1, int(p * len(timings)))], 3)

        return {
            "processed": processed,
            "outcomes": dict(self.outcomes),
            "lost_leases": self.lost,
            "released": self.released,
            "claims": self.claims,
            "claims_with_jobs": len(self.claim_seconds),
            "jobs_per_claim": round(self.claimed / len(timings), 1) if timings else 0,
            "claim_ms_p50": round(1000 * statistics.median(timings), 3) if timings else None,
            "claim_ms_p95": pct(0.95),
            "claim_ms_p99": pct(0.99),
            "claim_ms_max": pct(1.0),
            "busy_seconds": round(busy, 3) if busy > 0 else 0,
            "jobs_per_second": round(processed / busy, 1) if busy > 0 else None,
        }


class Worker:
    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        burst: bool = False,
        grace: float = 30.0,
        batch_size: int | None = None,
        worker_id: str | None = None,
        handle_signals: bool = False,
        reap: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.worker_id = worker_id or make_worker_id()
        self.queues = list(dict.fromkeys(queues or []))  # deduplicated, order kept
        self.concurrency = concurrency
        self.burst = burst
        self.grace = grace
        self.batch_size = max(1, batch_size or jobs_settings.BATCH_SIZE)
        self.handle_signals = handle_signals
        self.reap = reap
        self.stats = WorkerStats()
        self.job_types = {job_type.name: job_type for job_type in registry.all()}
        self._statement = ClaimStatement(
            self.worker_id,
            self.queues,
            versions={name: t.version for name, t in self.job_types.items()},
            leases={name: t.lease for name, t in self.job_types.items()},
        )

        self._lock = threading.Condition()
        self._buffer: collections.deque[Claim] = collections.deque()
        self._running: dict[int, Claim] = {}  # job id → claim, while a thread executes it
        # job id → lease, from the claim until the outcome is written (the heartbeat's list)
        self._leases: dict[int, Lease] = {}
        self._outcomes: list[Outcome] = []
        self._oldest_outcome_at: float | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()  # first signal: stop claiming, drain
        self._abort = threading.Event()  # second signal or grace over: release and exit
        self._avg_duration: float | None = None  # EWMA of handler run time, seconds
        self._threads: list[threading.Thread] = []
        self._heartbeat = Heartbeat(self._held_leases, report=self._report_alive)
        self._reaper = ReaperLoop(stop=self._stopping) if reap else None

    # ---- public -----------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, with ``burst``, until nothing is claimable). Returns 0."""
        logger.info(
            "worker started id=%s queues=%s concurrency=%s types=%s",
            self.worker_id,
            ",".join(self.queues) or "*",
            self.concurrency,
            len(self.job_types),
        )
        self._install_signal_handlers()
        self._threads = [
            threading.Thread(target=self._execute_loop, name=f"django_jobs-executor-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()
        self._heartbeat.start()
        if self._reaper is not None:
            self._reaper.start()
        try:
            self._main_loop()
        finally:
            self._shutdown()
        logger.info("worker stopped id=%s summary=%s", self.worker_id, self.stats.summary())
        return 0

    def stop(self, abort: bool = False) -> None:
        """Ask the worker to stop claiming (and, with ``abort``, to release what it holds)."""
        if self._stopping.is_set() or abort:
            self._abort.set()
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        self._wake.set()

    # ---- main thread ------------------------------------------------------------------------

    def _main_loop(self) -> None:
        db_retry = _DB_RETRY_FIRST
        while not self._stopping.is_set():
            # Cleared before looking at the state, so a wake-up sent meanwhile is never lost.
            self._wake.clear()
            try:
                self._flush_outcomes(force=False)
                claimed = self._claim_if_room()
                db_retry = _DB_RETRY_FIRST
            except DATABASE_UNAVAILABLE as exc:
                db_retry = self._database_unavailable(exc, db_retry)
                continue
            with self._lock:
                idle = not self._buffer and not self._running
                unwritten = bool(self._outcomes)
            if self.burst and idle and claimed == 0 and not unwritten:
                return
            # Executors wake this thread when they run low on claimed jobs; otherwise there is
            # nothing to do before the next flush, or the next poll of an empty queue.
            self._wake.wait(
                jobs_settings.OUTCOME_FLUSH_INTERVAL if unwritten else jobs_settings.POLL_INTERVAL
            )

    def _claim_if_room(self) -> int:
        if self._stopping.is_set():
            return 0
        target = self._claim_target()
        with self._lock:
            held = len(self._buffer) + len(self._running)
        # With a prefetch, claim again once the holding drained to half, so batches stay large;
        # but never leave an executor thread idle while jobs may be waiting.
        if held >= target or (held > target // 2 and held >= self.concurrency):
            return 0
        started = time.perf_counter()
        claims = transitions.claim(self._statement, target - held)
        elapsed = time.perf_counter() - started
        self.stats.claims += 1
        if not claims:
            return 0
        self.stats.claim_seconds.append(elapsed)
        if self.stats.first_claim_at is None:
            self.stats.first_claim_at = time.monotonic()
        self.stats.claimed += len(claims)
        with self._lock:
            for c in claims:
                job_type = self.job_types[c.type]
                self._leases[c.id] = Lease(
                    c.id, c.execution_id, job_type.lease, beats=job_type.heartbeat, timeout=job_type.timeout
                )
            self._buffer.extend(claims)
            self._lock.notify(len(claims))
        return len(claims)

    def _claim_target(self) -> int:
        """How many jobs to hold: one per thread, plus what they finish in PREFETCH_SECONDS."""
        if self._avg_duration is None:
            return self.concurrency
        per_thread = jobs_settings.PREFETCH_SECONDS / max(self._avg_duration, 1e-6)
        return max(self.concurrency, min(self.batch_size, int(self.concurrency * (1 + per_thread))))

    def _flush_outcomes(self, force: bool) -> None:
        with self._lock:
            if not self._outcomes:
                return
            due = (
                force
                or len(self._outcomes) >= self.batch_size
                or (not self._running and not self._buffer)
                or time.monotonic() - (self._oldest_outcome_at or 0) >= jobs_settings.OUTCOME_FLUSH_INTERVAL
            )
            if not due:
                return
            batch, self._outcomes, self._oldest_outcome_at = self._outcomes, [], None
        try:
            written = transitions.write_outcomes(batch)
        except DatabaseError:
            with self._lock:  # keep them: they are written when the database answers again
                self._outcomes[:0] = batch
                self._oldest_outcome_at = self._oldest_outcome_at or time.monotonic()
            raise
        lost: list[Outcome] = []
        with self._lock:  # executor threads count too
            for outcome in batch:
                self._leases.pop(outcome.job_id, None)
                if outcome.job_id in written:
                    self.stats.outcomes[str(outcome.status)] += 1
                else:
                    self.stats.lost += 1
                    lost.append(outcome)
        for outcome in lost:
            logger.warning(
                "outcome discarded, lease lost id=%s execution=%s status=%s",
                outcome.job_id, outcome.execution_id, outcome.status,
            )  # fmt: skip
        self.stats.last_outcome_at = time.monotonic()

    def _database_unavailable(self, exc: Exception, wait: float) -> float:
        logger.warning("database unavailable, retrying in %.1fs: %s", wait, type(exc).__name__)
        connections[jobs_settings.DATABASE].close()
        self._stopping.wait(wait)
        return min(_DB_RETRY_MAX, wait * 2)

    # ---- executor threads -------------------------------------------------------------------

    def _execute_loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._buffer and not self._stopping.is_set():
                        self._lock.wait()
                    if self._stopping.is_set() or not self._buffer:
                        # Stopping: jobs still in the buffer never started; the main thread
                        # releases them.
                        return
                    claim = self._buffer.popleft()
                    self._running[claim.id] = claim
                    lease = self._leases[claim.id]
                result = execute(claim, lease)
                with self._lock:
                    # Absent when shutdown released it past the grace period: the job is no
                    # longer ours, so its outcome is dropped (the guarded write would be too).
                    still_held = self._running.pop(claim.id, None) is not None
                    if result.outcome is not None and still_held:
                        if not self._outcomes:
                            self._oldest_outcome_at = time.monotonic()
                        self._outcomes.append(result.outcome)
                    else:
                        self._leases.pop(claim.id, None)
                        if still_held:
                            self.stats.lost += 1
                    d = result.duration
                    self._avg_duration = (
                        d if self._avg_duration is None else 0.8 * self._avg_duration + 0.2 * d
                    )
                    wake = len(self._buffer) <= len(self._running) or len(self._outcomes) >= self.batch_size
                if wake:
                    self._wake.set()
        finally:
            connections.close_all()

    # ---- shutdown -----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
            unstarted = list(self._buffer)
            self._buffer.clear()
        self._release(
            [Release(c.id, c.execution_id, started=False) for c in unstarted],
            "worker stopping: job not started",
        )
        deadline = time.monotonic() + self.grace
        while True:
            with self._lock:
                running = list(self._running.values())
            if not running:
                break
            if self._abort.is_set() or time.monotonic() >= deadline:
                logger.warning("grace period over, releasing %s running job(s)", len(running))
                self._release(
                    [
                        Release(c.id, c.execution_id, started=True, status=self._after_interruption(c))
                        for c in running
                    ],
                    "worker stopped before the job finished (grace period over)",
                )
                # Their threads may still finish; what they report is discarded below.
                with self._lock:
                    self._running.clear()
                break
            # While the database is away, outcomes wait in memory; the last flush below reports.
            with contextlib.suppress(*DATABASE_UNAVAILABLE):
                self._flush_outcomes(force=True)
            self._wake.wait(0.05)
            self._wake.clear()
        self._flush_outcomes_patiently(until=time.monotonic() + max(self.grace, 5.0))
        self._heartbeat.stop()
        if self._reaper is not None:
            self._reaper.join()
        # If the database is away, the dashboard shows the worker as silent until the reaper
        # forgets it.
        with contextlib.suppress(DatabaseError):
            transitions.forget_worker(self.worker_id)
        for thread in self._threads:
            thread.join(timeout=0.1)

    def _report_alive(self) -> None:
        with self._lock:
            running = len(self._leases)
        transitions.report_worker(
            worker_id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=",".join(self.queues),
            concurrency=self.concurrency,
            running=running,
            # dict.copy is one C call: safe while the main thread counts a new kind of outcome.
            processed=sum(dict.copy(self.stats.outcomes).values()),
        )

    def _held_leases(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    def _flush_outcomes_patiently(self, until: float | None = None) -> None:
        """Write buffered outcomes, retrying while the database is away until ``until``."""
        wait = _DB_RETRY_FIRST
        while True:
            try:
                self._flush_outcomes(force=True)
                return
            except DATABASE_UNAVAILABLE as exc:
                if until is None or time.monotonic() >= until:
                    logger.error(
                        "could not write %s outcome(s); the reaper will recover those jobs",
                        len(self._outcomes),
                    )
                    return
                wait = self._database_unavailable(exc, wait)
                time.sleep(wait)

    def _after_interruption(self, claim: Claim) -> str:
        job_type = self.job_types.get(claim.type)
        unsafe = job_type is not None and job_type.on_lost == "needs_review"
        return JobStatus.NEEDS_REVIEW if unsafe else JobStatus.PENDING

    def _release(self, executions: list[Release], reason: str) -> None:
        if not executions:
            return
        with self._lock:
            for execution in executions:
                self._leases.pop(execution.job_id, None)
        try:
            released = transitions.release(executions, reason)
        except DatabaseError:  # best effort on the way out: the reaper recovers what is left
            logger.exception("could not release %s job(s); the reaper will recover them", len(executions))
            return
        self.stats.released += len(released)
        logger.info("released %s job(s): %s", len(released), reason)

    # ---- signals ------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if not self.handle_signals:
            return  # embedded use (tests, a thread of another program): the owner calls stop()

        def handle(signum: int, frame: FrameType | None) -> None:
            again = self._stopping.is_set()
            logger.info(
                "%s received: %s",
                signal.Signals(signum).name,
                "releasing running jobs and exiting" if again else "no new claims, finishing running jobs",
            )
            self.stop(abort=again)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
