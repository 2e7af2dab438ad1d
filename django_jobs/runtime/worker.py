"""The worker: claims jobs in batches, hands them to the executor pool, writes outcomes in
batches, and shuts down without ever letting two executions of a job run at once.

Threads and their roles:
- the *main* thread claims (one statement per batch), gives back what the pool should not
  keep, and handles signals; it owns one database connection;
- the *outcome writer* writes what the slots finished through :mod:`django_jobs.runtime.outcomes` (one
  statement per batch), on a connection of its own: the next claim, the jobs running and the
  last batch's outcomes overlap instead of waiting for each other;
- the *executor pool* (:mod:`django_jobs.runtime.pool`): N slots, each running one job at a time on its
  own database connection, supervised;
- the *heartbeat* thread extends leases and runs the executions' side writes;
- the *reaper* thread, unless ``--no-reaper``;
- the *scheduler* thread (:mod:`django_jobs.maintenance.scheduler`) when schedules are declared, unless the
  worker drains and exits (``--burst``).

A claimed job is either running in a slot or waiting in the pool's buffer. The worker claims
beyond its idle slots only while jobs are short (see ``PREFETCH_SECONDS``), and only for slots
that should free up soon, so a burst of no-op jobs costs two statements per batch while a long
or stuck job never hoards others; a job that waited in the buffer too long is given back. With
short jobs it holds up to two batches and claims the next once half are done, so the slots
never wait for a claim.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
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

from django.conf import settings
from django.db import Error as DatabaseError  # every database error, InterfaceError included
from django.db import connections

from django_jobs import logs, signals, transitions
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened
from django_jobs.errors import DATABASE_UNAVAILABLE, ErrorCode
from django_jobs.maintenance.periodic import SchedulerLoop
from django_jobs.maintenance.reaper import ReaperLoop
from django_jobs.models import Job
from django_jobs.observe.liveness import Liveness
from django_jobs.observe.metrics import recorder as metrics_recorder  # `metrics` is Worker's flag
from django_jobs.observe.probes import HealthFile
from django_jobs.registry import JobType, declared_schedules, registry
from django_jobs.runtime import connectivity, outcomes
from django_jobs.runtime.context import Lease
from django_jobs.runtime.executor import Finished, execute
from django_jobs.runtime.heartbeat import Heartbeat
from django_jobs.runtime.listener import Listener
from django_jobs.runtime.pool import ExecutorPool, Held
from django_jobs.runtime.process_pool import ProcessPool
from django_jobs.transitions import Claim, ClaimStatement

logger = logging.getLogger("django_jobs.worker")

#: Reconnect back-off when the database is unreachable: first wait, and the longest.
_DB_RETRY_FIRST, _DB_RETRY_MAX = 0.1, 5.0
#: Seconds left on the lease of an execution still running when its process exits.
EXIT_MARGIN = 2.0
#: Where handlers run: threads of the worker, or child processes it can kill (process_pool.py).
POOLS = ("thread", "process")
#: A busy worker logs what it did this often (seconds).
SUMMARY_INTERVAL = 60.0
#: A timer for a scheduled job fires this long after the job is due (the database's clock
#: decides, and the notification left before its commit).
_DUE_MARGIN = 0.005
_MAX_TIMERS = 10_000
#: At most this long between a SIGTERM and the worker acting on it, when it is idle.
_SIGNAL_LATENCY = 0.5
#: Outcome statuses as the summaries name them: a job back to pending was retried.
_OUTCOME_NAMES = {"pending": "retried", "needs_review": "parked for review"}
#: Statuses that end a job: an execution that wrote one of these finished its job.
_FINAL = ("completed", "failed", "skipped", "cancelled", "needs_review")
_SUMMARY_ORDER = ("completed", "pending", "failed", "needs_review", "skipped", "cancelled")


def lease_for(
    claim: Claim, job_type: JobType, worker_id: str | None = None, sent_at: float | None = None
) -> Lease:
    """The lease of a claimed execution, on its type's terms, held by worker ``worker_id``.

    ``sent_at`` is the monotonic time just before the claim was sent: the database's lease
    started after it, so a lease counted from it never outlasts the database's (see
    ``Lease.held_until``).
    """
    claimed = time.monotonic() if sent_at is None else sent_at
    return Lease(
        claim.id,
        claim.execution_id,
        job_type.lease,
        beats=job_type.heartbeat,
        timeout=job_type.timeout,
        counted=claim.counted,
        claimed=claimed,
        last_beat=claimed,
        claimed_db=claim.claimed_at,
        claim=claim,
        worker_id=worker_id,
    )


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
    stuck: int = 0
    #: Turns of the claim loop that claimed nothing because the heartbeat was unanswered.
    held_back: int = 0
    first_claim_at: float | None = None
    last_outcome_at: float | None = None

    @property
    def executions(self) -> int:
        """Executions whose outcome this worker wrote (a job retried twice counts three)."""
        return sum(self.outcomes.values())

    @property
    def jobs_finished(self) -> int:
        """Jobs this worker brought to an end: completed, failed, skipped, cancelled or parked."""
        return sum(self.outcomes[status] for status in _FINAL)

    def describe(self, outcomes: collections.Counter[str] | None = None) -> str:
        """``8 executions: 3 completed, 4 retried, 1 failed (4 jobs finished)`` and the rest."""
        outcomes = self.outcomes if outcomes is None else outcomes
        executions = sum(outcomes.values())
        order = [*_SUMMARY_ORDER, *sorted(set(outcomes) - set(_SUMMARY_ORDER))]
        parts = ", ".join(
            f"{outcomes[status]} {_OUTCOME_NAMES.get(status, status)}" for status in order if outcomes[status]
        )
        finished = sum(outcomes[status] for status in _FINAL)
        text = f"{executions} execution{'s' if executions != 1 else ''}"
        if parts:
            text += f": {parts} ({finished} job{'s' if finished != 1 else ''} finished)"
        return text

    def summary(self) -> dict[str, Any]:
        processed = self.executions
        busy = (self.last_outcome_at or 0) - (self.first_claim_at or 0)
        timings = sorted(self.claim_seconds)

        def pct(p: float) -> float | None:
            if not timings:
                return None
            return round(1000 * timings[min(len(timings) - 1, int(p * len(timings)))], 3)

        return {
            "executions": processed,
            "jobs_finished": self.jobs_finished,
            "outcomes": dict(self.outcomes),
            "lost_leases": self.lost,
            "released": self.released,
            "stuck": self.stuck,
            "held_back": self.held_back,
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
        exits_after_run: bool = False,
        pool: str = "thread",
        max_jobs_per_child: int = 1000,
        max_child_memory_mb: float | None = None,
        until_settled: bool = False,
        queue_slots: dict[str, int] | None = None,
        metrics: bool = False,
        health_file: HealthFile | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {', '.join(POOLS)}")
        self.worker_id = worker_id or make_worker_id()
        self.queues = list(dict.fromkeys(queues or []))  # deduplicated, order kept
        #: Slots of each queue, when the queues do not share them all: at most that many of a
        #: queue's jobs are held (running or claimed) at once.
        self.queue_slots = dict(queue_slots) if queue_slots else None
        if self.queue_slots is not None:
            if sorted(self.queue_slots) != sorted(self.queues):
                raise ValueError("queue_slots must give slots to each queue served, and only to them")
            if any(slots < 1 for slots in self.queue_slots.values()):
                raise ValueError("a queue's slots must be >= 1")
            if sum(self.queue_slots.values()) > concurrency:
                raise ValueError("the queues' slots add up to more than the concurrency")
        self.concurrency = concurrency
        self.burst = burst
        #: Like ``burst``, but waits out retry backoffs: stops once no job of the types and
        #: queues it serves is pending or running.
        self.until_settled = until_settled
        #: Why the worker stopped (or is stopping), in words, for the logs.
        self.stop_reason: str | None = None
        self.grace = grace
        self.batch_size = max(1, batch_size or jobs_settings.BATCH_SIZE)
        self.handle_signals = handle_signals
        self.reap = reap
        #: The process ends when run() returns (runjobs): executions still running at the end
        #: end with it, so their leases may be cut short.
        self.exits_after_run = exits_after_run
        #: Executions still running when the worker stopped waiting for them.
        self.abandoned: list[Claim] = []
        self.stats = WorkerStats()
        self.job_types = {job_type.name: job_type for job_type in registry.all()}
        self._statement = ClaimStatement(
            self.worker_id,
            self.queues,
            versions={name: t.version for name, t in self.job_types.items()},
            leases={name: t.lease for name, t in self.job_types.items()},
            oldest={name: t.oldest_readable_version for name, t in self.job_types.items()},
            rate_limits={name: t.rate_limit for name, t in self.job_types.items() if t.rate_limit},
        )
        self._rate_windows_open = not self._statement.rate_limited

        # How long a prefetched job may wait for a slot before the main thread gives it back:
        # within the shortest lease (a buffered job's lease is not extended), and long enough
        # that a brief stall does not throw a prefetch away. A slot also refuses, by itself, a
        # job with less than half its lease left (Lease.may_start): this wait may be longer
        # than that with short leases, and the main thread looks only when it turns.
        shortest_lease = min([t.lease for t in self.job_types.values()] or [jobs_settings.LEASE_TIMEOUT])
        self._buffer_wait = max(10 * jobs_settings.PREFETCH_SECONDS, min(5.0, shortest_lease / 3))
        # A heartbeat unanswered this long may have let the leases of this worker's jobs expire
        # (and be taken back): a job started now could not keep its lease either. Types that
        # do not beat live on their lease alone, whatever the heartbeat does.
        self._unanswered_limit = min(
            [t.lease for t in self.job_types.values() if t.heartbeat] or [jobs_settings.LEASE_TIMEOUT]
        )
        self._holding_back = False  # no job starts until the heartbeat is answered again
        self._lock = threading.Lock()
        self._finished: list[Finished] = []  # waiting for the outcome writer
        self._oldest_finished_at: float | None = None
        self._writing = 0  # batches of outcomes being written, under _lock
        self._wake = threading.Event()
        self._outcomes_waiting = threading.Event()  # wakes the outcome writer
        self._writer_done = threading.Event()  # the outcome writer is to stop
        # The database answered again (the heartbeat got through after a cut): an outcome
        # writer waiting out its back-off retries at once, before the leases of the executions
        # it holds run out and their jobs are handed to another worker to run again.
        self._database_answered = threading.Event()
        self._writer_in_outage = False  # its last write failed: claims wait while it holds outcomes
        self._writer = threading.Thread(target=self._write_outcomes, name="django_jobs-writer", daemon=True)
        # The main thread is woken to claim once the buffer is down to this many jobs.
        self._refill_at = 0
        self._stopping = threading.Event()  # first signal: stop claiming, drain
        self._closed = threading.Event()  # shutdown is over: nobody flushes outcomes any more
        self._abort = threading.Event()  # second signal or grace over: stop waiting
        self._signals = 0  # SIGTERM / SIGINT received, counted by the handler
        self._signal_name = "a signal"
        self._avg_duration: float | None = None  # EWMA of handler run time, seconds
        self._outage_until = 0.0  # no claims before this (monotonic): the database refused us
        self._outage_wait = _DB_RETRY_FIRST
        self._types_reported = False
        self._heartbeat = Heartbeat(self._running_leases, report=self._report_alive)
        self.pool = pool
        self._pool: ExecutorPool = (
            ProcessPool(
                concurrency,
                self._record,
                max_jobs=max_jobs_per_child,
                max_memory_mb=max_child_memory_mb,
                on_start=self._started,
            )
            if pool == "process"
            else ExecutorPool(concurrency, self._execute, self._record)
        )
        #: Counters and histograms of this worker's executions (``runjobs --metrics-port``);
        #: None when off, so that each job pays one attribute check.
        self._metrics = metrics_recorder() if metrics else None
        self._reaper = (
            ReaperLoop(stop=self._stopping, on_pass=self._metrics.on_reaped if self._metrics else None)
            if reap
            else None
        )
        #: What the probes ask: is this worker alive and useful, can it take work.
        self.liveness = Liveness(
            slots=concurrency, stuck=self._pool.stuck, heartbeat=self._heartbeat.turned_at
        )
        self._heartbeat.on_database = self._database_seen
        self._health_file = health_file
        # A worker that drains and exits fires no schedule: its ticks would never settle.
        self._scheduler = (
            SchedulerLoop(stop=self._stopping, worker_id=self.worker_id)
            if not (burst or until_settled) and declared_schedules()
            else None
        )
        self._summary_at = time.monotonic() + SUMMARY_INTERVAL
        self._summarised: collections.Counter[str] = collections.Counter()
        # When the scheduled jobs the listener heard of are due (monotonic), earliest first.
        self._due: list[float] = []
        # What the worker reads rather than hears (see _look_ahead): wanted at the first turn
        # (what was scheduled before this worker started was announced to nobody) and after
        # every (re)connection of the listener; main thread only. A worker that drains and
        # exits (burst) waits for nothing scheduled: it reads only the pauses it cannot hear.
        self._outlook_wanted = threading.Event()
        if not burst:
            self._outlook_wanted.set()
        self._outlook_at = 0.0  # monotonic time of the last read
        self._outlook_due: float | None = None  # when the next job it found is due (monotonic)
        self._held_by_queue: collections.Counter[str] = collections.Counter()  # under _lock
        self._turn = 0  # which served queue comes first in the next claim
        # Queues the listener heard paused, whose prefetched jobs are to be given back.
        self._paused: set[str] = set()
        # A worker that runs until stopped listens; one that drains and exits polls.
        self._listener = (
            Listener(
                self.queues,
                wake=self._wake.set,
                due_in=self._note_due,
                stop=self._stopping,
                paused=self._note_paused,
                connected=self._listener_connected,
            )
            if jobs_settings.NOTIFY and not (burst or until_settled)
            else None
        )

    # ---- public -----------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, with ``burst``, until nothing is claimable). Returns 0."""
        with connectivity.worker_statements():  # the claim loop's connection: bounded statements
            return self._work()

    def _work(self) -> int:
        self._install_signal_handlers()
        self._pool.start()
        self._writer.start()
        self._log_start()
        self._heartbeat.start()
        if self._listener is not None:
            self._listener.start()
        if self._reaper is not None:
            # Jobs of a worker that was killed (often this one's predecessor, restarted by the
            # process manager) come back now that their leases expired, not a reaper interval
            # later.
            self._reaper.run_now()
            self._reaper.start()
        if self._scheduler is not None:
            self._scheduler.start()
        self.liveness.started()
        try:
            self._main_loop()
        finally:
            self._shutdown()
        logger.info(
            "worker stopped id=%s: %s; %s lease(s) lost, %s prefetched job(s) given back",
            self.worker_id, self.stats.describe(), self.stats.lost, self.stats.released,
            extra=logs.worker_fields(self.worker_id),
        )  # fmt: skip
        return 0

    def _log_start(self) -> None:
        types = sorted(self.job_types.values(), key=lambda t: t.name)
        listed = ", ".join(f"{t.name} v{t.version}" for t in types)
        mode = " until settled" if self.until_settled else " in burst mode" if self.burst else ""
        logger.info(
            "worker started%s id=%s queues=%s concurrency=%s pool=%s types=%s: %s",
            mode, self.worker_id, ",".join(self.queues) or "all", self.concurrency, self.pool,
            len(types), listed or "none", extra=logs.worker_fields(self.worker_id),
        )  # fmt: skip
        changed = logs.changed_settings(getattr(settings, "DJANGO_JOBS", {}) or {})
        if changed:
            logger.info(
                "settings that differ from the defaults: %s", ", ".join(changed),
                extra=logs.worker_fields(self.worker_id),
            )  # fmt: skip

    @property
    def holding_back(self) -> bool:
        """Whether the worker starts no job now: its heartbeat has gone unanswered for as long
        as the shortest lease (a network cut, a stuck connection)."""
        return not self._may_start_jobs()

    def stop(self, abort: bool = False, reason: str = "asked to stop") -> None:
        """Ask the worker to stop claiming (and, with ``abort``, to stop waiting for its jobs)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self._stopping.is_set() or abort:
            self._abort.set()
        self._stopping.set()
        self.liveness.stopping()
        self._pool.stop()
        self._wake.set()

    # ---- main thread ------------------------------------------------------------------------

    def _main_loop(self) -> None:
        db_retry = _DB_RETRY_FIRST
        woken, claim_at = True, 0.0
        while True:
            self._act_on_signals()
            if self._stopping.is_set():
                return
            self.liveness.loop_turned()
            if self._health_file is not None:
                self._health_file.turn(self.liveness)
            # Cleared before looking at the state, so a wake-up sent meanwhile is never lost.
            self._wake.clear()
            try:
                if not self._writer.is_alive():
                    self._flush(force=False)  # the writer died of a bug of ours: write here
                self._give_back_overdue()
                self._give_back_paused()
                self._give_back_unstartable()
                # A turn that only looks at the signals (see below) claims nothing.
                looked = woken or time.monotonic() >= claim_at
                claimed = self._claim_and_look(woken) if looked else 0
                db_retry = _DB_RETRY_FIRST
            except DATABASE_UNAVAILABLE as exc:
                self.liveness.database_lost()
                db_retry = self._database_unavailable(exc, db_retry)
                continue
            buffered, running, idle = self._pool.counts()
            if claimed and idle > buffered:
                # Slots are left idle although the claim found jobs: it may have passed over
                # jobs of a busy concurrency key that filled its batch. Look again at once; a
                # claim that finds nothing ends this.
                continue
            with self._lock:
                # A batch being written counts: a retry it writes may be claimable at once.
                unwritten = bool(self._finished or self._writing)
            settled = looked and not buffered and not running and claimed == 0 and not unwritten
            # A claim held back for an unanswered heartbeat says nothing about what is pending.
            settled = settled and not self._holding_back
            if settled and time.monotonic() >= self._outage_until:
                if self.burst:
                    self.stop_reason = "nothing left to claim (burst)"
                    return
                if self.until_settled and self._nothing_active():
                    self.stop_reason = "no job pending or running (until settled)"
                    return
            self._log_summary_if_due()
            # Slots wake this thread when they run low on claimed jobs, the listener when a job
            # becomes pending; otherwise there is nothing to do before the next flush, the next
            # scheduled job, or the next poll. A signal handler cannot wake it (it may take no
            # lock), so an idle wait is cut into turns short enough to act on signals soon.
            wait = self._idle_wait(held=bool(buffered or running or unwritten))
            # A turn that did not look keeps the time it waits for (or comes earlier, for a
            # timer): pushing it back at every turn would never get there.
            claim_at = time.monotonic() + wait if looked else min(claim_at, time.monotonic() + wait)
            woken = self._wake.wait(min(wait, _SIGNAL_LATENCY) if self.handle_signals else wait)

    def _idle_wait(self, held: bool) -> float:
        now = time.monotonic()
        # Held jobs need their buffer and slots looked after (the writer wakes this thread once
        # the last outcome is written); without a listener, polling is how new jobs are found;
        # with one, an idle worker reads its outlook this often (see _claim_and_look).
        wait = jobs_settings.POLL_INTERVAL
        if self._outlook_due is not None:
            wait = min(wait, max(0.0, self._outlook_due - now))
        with self._lock:
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)  # this turn's claim took what was due
            if self._due:
                wait = min(wait, self._due[0] - now)
        # The loop's turns are its sign of life for the probes: an idle wait stays well within
        # the limit after which a loop that does not turn is presumed hung.
        wait = min(wait, self.liveness.limits.stall / 4)
        if self._holding_back:
            wait = min(wait, jobs_settings.POLL_INTERVAL)  # look again soon: the heartbeat may answer
        outage_left = self._outage_until - now
        return min(wait, outage_left) if outage_left > 0 else wait

    def _note_due(self, seconds: float) -> None:
        """The listener heard of a job due in ``seconds``: claim then, not at the next poll."""
        due = time.monotonic() + seconds + _DUE_MARGIN
        with self._lock:
            heapq.heappush(self._due, due)
            if len(self._due) > _MAX_TIMERS:
                # Forget the latest: the outlook finds them. Keeping every due time of a huge
                # schedule would cost memory for nothing.
                self._due = heapq.nsmallest(_MAX_TIMERS // 2, self._due)
        self._wake.set()

    def _listener_connected(self) -> None:
        """The listener (re)connected: what was announced while nobody listened was never heard,
        so claim now and read the outlook (due times, pauses) at this turn."""
        self._outlook_wanted.set()
        self._wake.set()

    def _claim_and_look(self, woken: bool) -> int:
        """Claim, and read the outlook when it may know what no notification told; returns how
        many jobs were claimed.

        The periodic check of an idle listening worker (every ``POLL_INTERVAL``, when nothing
        woke it and no timer is due) reads the outlook instead of claiming, and claims only if
        a job is due now: an empty claim scans every claim-index entry of jobs not due yet,
        the outlook a few entries (see ``transitions.execution._OUTLOOK``).
        """
        now = time.monotonic()
        timer_fired = self._outlook_timer_fired(now)
        periodic_check = not (woken or timer_fired or self._heard_due(now)) and self._idle_listening()
        if periodic_check and not self._look_ahead():
            return 0
        claimed = self._claim_if_room()
        # After a timer of the outlook, look past the job it was set for.
        if timer_fired or self._outlook_wanted.is_set() or self._pauses_unheard(now):
            self._look_ahead()
        return claimed

    def _outlook_timer_fired(self, now: float) -> bool:
        """Whether the job the last outlook found is due now (the timer is spent)."""
        if self._outlook_due is None or self._outlook_due > now:
            return False
        self._outlook_due = None
        return True

    def _heard_due(self, now: float) -> bool:
        """Whether a scheduled job the listener heard of is due now."""
        with self._lock:
            return bool(self._due) and self._due[0] <= now

    def _idle_listening(self) -> bool:
        """Listening, and holding nothing: no job buffered, running or waiting to be written."""
        if self._listener is None or not self._listener.listening.is_set():
            return False
        buffered, running, _ = self._pool.counts()
        with self._lock:
            unwritten = bool(self._finished or self._writing)
        return not (buffered or running or unwritten)

    def _pauses_unheard(self, now: float) -> bool:
        """Whether prefetched jobs may belong to a queue paused since, with nobody listening for
        pauses (``NOTIFY`` off, or the listener down): read the paused set every POLL_INTERVAL."""
        if self._listener is not None and self._listener.listening.is_set():
            return False
        if now - self._outlook_at < jobs_settings.POLL_INTERVAL:
            return False
        buffered, _, _ = self._pool.counts()
        return buffered > 0

    def _look_ahead(self) -> bool:
        """Read the outlook: set a timer for the next job due, give back what was prefetched of
        paused queues. Returns whether a job is due now (one the last claim did not get: it
        became due since, or another worker was claiming it)."""
        # Cleared before the read: a reconnection of the listener during it asks for another.
        self._outlook_wanted.clear()
        try:
            seen = transitions.outlook(self._statement)
        except BaseException:
            self._outlook_wanted.set()  # read it once the database answers again
            raise
        now = self._outlook_at = time.monotonic()
        due_later = seen.due_in is not None and seen.due_in > 0
        # Due now but not claimed: the next periodic check claims it; no timer, or a job that
        # stays unclaimable (its row locked by a long transaction) would spin this loop. A burst
        # worker exits once nothing is claimable: it sets no timer for a job due later.
        timer = seen.due_in is not None and due_later and not self.burst
        self._outlook_due = now + seen.due_in + _DUE_MARGIN if seen.due_in is not None and timer else None
        if seen.paused:
            with self._lock:
                self._paused |= seen.paused
            self._give_back_paused()
        return seen.due_in is not None and not due_later

    def _note_paused(self, queue: str) -> None:
        """The listener heard that ``queue`` was paused: its next claims skip it already."""
        with self._lock:
            self._paused.add(queue)
        self._wake.set()

    def _give_back_paused(self) -> None:
        """Give back the prefetched jobs of queues paused since their claim: a pause stops
        what has not started; what runs finishes."""
        with self._lock:
            paused, self._paused = self._paused, set()
        held = self._pool.take_buffered_of(paused) if paused else []
        if held:
            logger.info(
                "giving back %s prefetched job(s) of paused queue(s) %s", len(held), ",".join(sorted(paused)),
                extra=logs.jobs_fields((h.claim.id for h in held), self.worker_id),
            )  # fmt: skip
            self._give_back(held)

    def _nothing_active(self) -> bool:
        """No job this worker could ever run is pending (now or later) or running."""
        return not transitions.any_active(types=list(self.job_types), queues=self.queues)

    def _log_summary_if_due(self) -> None:
        now = time.monotonic()
        if now < self._summary_at:
            return
        # The outcome writer counts meanwhile: dict.copy is one C call, safe while it adds a key.
        outcomes = collections.Counter(dict.copy(self.stats.outcomes))
        since = outcomes - self._summarised
        self._summarised = outcomes
        elapsed = SUMMARY_INTERVAL + (now - self._summary_at)
        self._summary_at = now + SUMMARY_INTERVAL
        if not since:
            return  # an idle worker stays quiet
        buffered, running, _ = self._pool.counts()
        logger.info(
            "last %.0fs: %s, %.1f/s; holding %s", elapsed, self.stats.describe(since),
            sum(since.values()) / elapsed, buffered + running, extra=logs.worker_fields(self.worker_id),
        )  # fmt: skip

    def _claim_if_room(self) -> int:
        if self._stopping.is_set() or time.monotonic() < self._outage_until:
            return 0
        if not self._may_start_jobs():
            self.stats.held_back += 1
            return 0
        if self._writer_in_outage and self._finished:
            # What this worker ran is still unwritten: a job claimed now would finish into the
            # same queue, and its lease would run out waiting (then it runs again elsewhere).
            return 0
        buffered, running, idle = self._pool.counts()
        target = self._claim_target()
        held = buffered + running
        # With a prefetch, claim again once the holding drained to half, so batches stay large;
        # but never leave a slot idle while jobs may be waiting.
        if held >= target or (idle <= buffered and held > target // 2):
            return 0
        if not self._rate_windows_open:
            transitions.open_rate_windows(self._statement.rate_limited)
            self._rate_windows_open = True
        limit, rooms = min(self.batch_size, target - held), None
        if self.queue_slots is not None:
            with self._lock:
                rooms = [max(0, self.queue_slots[q] - self._held_by_queue[q]) for q in self.queues]
            limit = min(limit, sum(rooms))
            if not limit:
                return 0
        sent_at, started = time.monotonic(), time.perf_counter()
        self._turn += 1
        claims = transitions.claim(
            self._statement, limit, start_now=max(0, idle - buffered), rooms=rooms, turn=self._turn
        )
        elapsed = time.perf_counter() - started
        self.liveness.database_answered()
        self.stats.claims += 1
        if not claims:
            return 0
        self.stats.claim_seconds.append(elapsed)
        if self.stats.first_claim_at is None:
            self.stats.first_claim_at = time.monotonic()
        self.stats.claimed += len(claims)
        if self.queue_slots is not None:
            with self._lock:
                self._held_by_queue.update(c.queue for c in claims)
        self._pool.submit([Held(c, self._lease_for(c, sent_at)) for c in claims])
        return len(claims)

    def _lease_for(self, claim: Claim, sent_at: float | None = None) -> Lease:
        return lease_for(claim, self.job_types[claim.type], self.worker_id, sent_at)

    def _claim_target(self) -> int:
        """How many jobs to hold: one per live slot, plus what the slots that should free up
        soon finish in PREFETCH_SECONDS, up to two batches (the slots run one while the next
        is claimed). Sets the level at which the slots ask for more: half of it."""
        if self._avg_duration is None:
            target = self.concurrency
        else:
            # A slot busy for far longer than jobs usually take (a stuck call, a long job) is
            # not expected to take buffered jobs soon: it gets no prefetch.
            soon = self._pool.soon_free(busy_for=max(1.0, 10 * self._avg_duration))
            per_slot = jobs_settings.PREFETCH_SECONDS / max(self._avg_duration, 1e-6)
            target = max(self.concurrency, min(2 * self.batch_size, self.concurrency + int(soon * per_slot)))
        self._refill_at = target // 2
        return target

    def _give_back_overdue(self) -> None:
        """Give back buffered jobs no slot took in time, and notice stuck slots."""
        overdue = self._pool.take_buffered(older_than=self._buffer_wait)
        if overdue:
            logger.info(
                "giving back %s prefetched job(s) no slot took in time", len(overdue),
                extra=logs.jobs_fields((h.claim.id for h in overdue), self.worker_id),
            )  # fmt: skip
            self._give_back(overdue)
        self.stats.stuck += len(self._pool.replace_stuck())

    def _may_start_jobs(self) -> bool:
        """Whether the heartbeat reached the database within the shortest lease: if not, this
        worker claims nothing and starts nothing until it does (see docs/workers.md).

        A worker cut off from the database by a network fault whose heartbeat connection is
        stuck would otherwise run jobs whose leases nobody extends: other workers (or its own
        reaper) take them back, and they run twice.
        """
        unanswered = self._heartbeat.unanswered_for(time.monotonic())
        holding_back = unanswered >= self._unanswered_limit
        if holding_back != self._holding_back:
            self._note_holding_back(holding_back, unanswered)
        return not holding_back

    def _note_holding_back(self, holding_back: bool, unanswered: float) -> None:
        with self._lock:  # the claim loop and the slots ask: one of them says it
            if holding_back == self._holding_back:
                return
            self._holding_back = holding_back
        if holding_back:
            logger.warning(
                "heartbeat unanswered for %.1fs (the shortest lease is %gs): starting no job until "
                "it gets through", unanswered, self._unanswered_limit,
                extra=logs.worker_fields(self.worker_id),
            )  # fmt: skip
        else:
            logger.info("heartbeat answered again: starting jobs", extra=logs.worker_fields(self.worker_id))
            self._database_answered.set()
            self._wake.set()

    def _give_back_unstartable(self) -> None:
        """While no job may start, what was prefetched goes back (or to the reaper, if the
        database is away: its lease runs out, and it never ran)."""
        if self._may_start_jobs():
            return
        held = self._pool.take_buffered()
        if held:
            self._give_back(held)

    def _give_back(self, held: list[Held]) -> None:
        """Release buffered jobs that never started: pending again at once, attempts untouched."""
        self._let_go([h.claim for h in held])
        self._record_many([Finished(h.claim, Happened.NOT_STARTED) for h in held])

    def _let_go(self, claims: list[Claim]) -> None:
        """These jobs no longer hold a slot of their queue (counted only when queues have slots:
        this runs for every job)."""
        if self.queue_slots is None:
            return
        with self._lock:
            self._held_by_queue.subtract(c.queue for c in claims)

    def _write_outcomes(self) -> None:
        """The outcome writer's thread: writes finished executions in batches until shutdown
        (which writes what is left), and waits out an unreachable database."""
        db_retry = _DB_RETRY_FIRST
        connectivity.run_worker_statements()
        try:
            while not self._writer_done.is_set():
                with self._lock:
                    waiting = bool(self._finished)
                # Nothing to write: sleep until the first outcome arrives (it sets the event).
                self._outcomes_waiting.wait(jobs_settings.OUTCOME_FLUSH_INTERVAL if waiting else None)
                self._outcomes_waiting.clear()
                try:
                    wrote = self._flush(force=False)
                    db_retry = _DB_RETRY_FIRST
                    self._writer_in_outage = False
                except DATABASE_UNAVAILABLE as exc:
                    self._writer_in_outage = True
                    logger.warning(
                        "database unavailable for outcomes, retrying in %.1fs: %s",
                        db_retry,
                        type(exc).__name__,
                        extra=logs.worker_fields(self.worker_id),
                    )
                    connections[jobs_settings.DATABASE].close()
                    self._database_answered.wait(db_retry)
                    self._database_answered.clear()
                    db_retry = min(_DB_RETRY_MAX, db_retry * 2)
                    continue
                if wrote and not self._pool.any_running():
                    self._wake.set()  # the main thread may be waiting for the last outcome
        except Exception:  # a bug of ours: the main thread's final flushes still write them
            logger.exception("the outcome writer stopped", extra=logs.worker_fields(self.worker_id))
        finally:
            connections.close_all()

    def _flush(self, force: bool) -> int:
        """Write the finished executions if it is time (or ``force``); returns how many."""
        with self._lock:
            if not self._finished:
                return 0
            _, running, _ = self._pool.counts()
            due = (
                force
                or len(self._finished) >= self.batch_size
                or not running
                or time.monotonic() - (self._oldest_finished_at or 0) >= jobs_settings.OUTCOME_FLUSH_INTERVAL
            )
            if not due:
                return 0
            batch, self._finished, self._oldest_finished_at = self._finished, [], None
            self._writing += 1
        try:
            written = outcomes.record(batch, worker_id=self.worker_id)  # job id → the outcome written
        except DatabaseError:  # only the unreachable database gets here: keep them for later
            with self._lock:
                self._finished[:0] = batch
                self._oldest_finished_at = self._oldest_finished_at or time.monotonic()
            raise
        finally:
            with self._lock:
                self._writing -= 1
        outcomes.announce(batch, written, self.worker_id)
        recorder = self._metrics
        for finished in batch:
            outcome = written.get(finished.claim.id)
            if recorder is not None:
                recorder.on_finished(finished, outcome)
            if outcome is not None:
                if finished.happened is Happened.NOT_STARTED:
                    self.stats.released += 1
                else:
                    self.stats.outcomes[str(outcome.status)] += 1
            else:
                self.stats.lost += 1
                logger.warning(
                    "outcome discarded, lease lost id=%s execution=%s",
                    finished.claim.id, finished.claim.execution_id,
                    extra=logs.claim_fields(finished.claim, self.worker_id),
                )  # fmt: skip
        self.stats.last_outcome_at = time.monotonic()
        return len(batch)

    def _database_unavailable(self, exc: Exception, wait: float) -> float:
        logger.warning(
            "database unavailable, retrying in %.1fs: %s", wait, type(exc).__name__,
            extra=logs.worker_fields(self.worker_id),
        )  # fmt: skip
        connections[jobs_settings.DATABASE].close()
        self._stopping.wait(wait)
        return min(_DB_RETRY_MAX, wait * 2)

    # ---- the pool's side (executor threads) -----------------------------------------------------

    def _execute(self, claim: Claim, lease: Lease) -> Finished:
        if not self._may_start_jobs():
            return Finished(claim, Happened.NOT_STARTED)  # given back unstarted, uncounted
        return execute(claim, lease, side_writer=self._heartbeat, on_start=self._started)

    def _started(self, claim: Claim) -> None:
        """An execution is about to run its handler: count it, and tell ``job_started``'s
        receivers, if any."""
        if self._metrics is not None:
            self._metrics.on_started(claim)
        if signals.listened(signals.job_started):
            signals.send(
                signals.job_started, Job, job_id=claim.id, type=claim.type, queue=claim.queue,
                attempt=claim.attempt, execution_id=claim.execution_id, worker_id=self.worker_id,
            )  # fmt: skip

    def _record(self, finished: Finished) -> None:
        """Called by a slot when its job ended."""
        self._let_go([finished.claim])
        if finished.error_code == ErrorCode.DATABASE_UNAVAILABLE and finished.happened in (
            Happened.NOT_STARTED,
            Happened.OUTAGE,
        ):
            self._back_off_claims()
        elif finished.ran_for is not None:
            d = finished.ran_for
            self._avg_duration = d if self._avg_duration is None else 0.8 * self._avg_duration + 0.2 * d
            self._outage_wait = _DB_RETRY_FIRST
        if finished.happened is None:
            self.stats.lost += 1
            if self._metrics is not None:
                self._metrics.on_finished(finished, None)
            return
        if not self._record_many([finished]):
            # An execution the worker stopped waiting for (shutdown past its grace) ended
            # after all: write its outcome here; the guarded write lands only if its lease
            # was not taken over meanwhile.
            with contextlib.suppress(DatabaseError):
                written = outcomes.record([finished], worker_id=self.worker_id)
                outcomes.announce([finished], written, self.worker_id)
                self.stats.outcomes.update(str(o.status) for o in written.values())

    def _record_many(self, finished: list[Finished]) -> bool:
        """Queue outcomes for the writer; False once the worker is closed (nobody writes)."""
        with self._lock:
            if self._closed.is_set():
                return False
            first = not self._finished
            if first:
                self._oldest_finished_at = time.monotonic()
            self._finished.extend(finished)
            many = len(self._finished) >= self.batch_size
        if first or many or not self._pool.any_running():
            self._outcomes_waiting.set()
        if self._pool.running_low(self._refill_at):
            self._wake.set()
        return True

    def _back_off_claims(self) -> None:
        """The jobs database refused an executor: claim nothing for a while, longer each time."""
        with self._lock:
            wait = self._outage_wait
            self._outage_wait = min(_DB_RETRY_MAX, wait * 2)
            self._outage_until = max(self._outage_until, time.monotonic() + wait)
        logger.warning(
            "jobs database refused an executor: no claims for %.1fs",
            wait,
            extra=logs.worker_fields(self.worker_id),
        )

    def _database_seen(self, answered: bool) -> None:
        """The heartbeat reached the database, or could not."""
        if answered:
            self.liveness.database_answered()
        else:
            self.liveness.database_lost()

    def _running_leases(self) -> list[Lease]:
        return self._pool.running_leases()

    # ---- shutdown -----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop claiming, give back what never started, let running jobs finish within the
        grace period, write every outcome.

        With a process pool, a job still running when the grace period is over has its child
        killed, and goes back as interrupted. With threads, it is *not* given back: its thread may
        still be running it, and a job given back is claimable at once, so two executions would
        overlap. It keeps its lease, which is no longer extended; once the lease expires, the
        reaper decides (with the type's policy, as for a killed worker). When the process ends
        with the worker (``exits_after_run``), the lease is cut to ``EXIT_MARGIN`` seconds: the
        execution ends with the process, well before.
        """
        self._stopping.set()
        self.liveness.stopping()
        self._pool.stop()
        self._give_back(self._pool.take_buffered())
        _, running, _ = self._pool.counts()
        logger.info(
            "worker stopping id=%s: %s%s", self.worker_id, self.stop_reason or "asked to stop",
            f"; {running} running job(s) get {self.grace:g}s to finish" if running else "",
            extra=logs.worker_fields(self.worker_id),
        )  # fmt: skip
        deadline = time.monotonic() + self.grace
        interrupted = False
        while True:
            self._act_on_signals()
            _, running, _ = self._pool.counts()
            if not running:
                break
            if not interrupted and (self._abort.is_set() or time.monotonic() >= deadline):
                # Child processes can be killed: their jobs are then known to have stopped, and
                # go back with an `interrupted` outcome. Threads cannot: their jobs are left to
                # their leases.
                if not self._pool.interrupt():
                    self._abandon(self._pool.running_jobs())
                    break
                interrupted = True
                logger.warning(
                    "grace period over: killing the processes of %s running job(s)", running,
                    extra=logs.jobs_fields((h.claim.id for h in self._pool.running_jobs()), self.worker_id),
                )  # fmt: skip
            # While the database is away, outcomes wait in memory; the last flush below reports.
            with contextlib.suppress(*DATABASE_UNAVAILABLE):
                self._flush(force=True)
            if self._health_file is not None:
                self._health_file.turn(self.liveness)  # draining within the grace is healthy
            self._wake.wait(0.05)
            self._wake.clear()
        self._writer_done.set()
        self._outcomes_waiting.set()
        self._database_answered.set()
        # A writer stuck on an unreachable database does not hold the shutdown: the flushes
        # below take what it has not taken (it writes its own batch if it ever can).
        if self._writer.is_alive():
            self._writer.join(timeout=max(self.grace, 5.0))
        self._flush_patiently(until=time.monotonic() + max(self.grace, 5.0))
        with self._lock:
            self._closed.set()
        self._flush_patiently(until=time.monotonic())  # what arrived while closing
        self._heartbeat.stop()
        if self._reaper is not None:
            self._reaper.join()
        if self._scheduler is not None:
            self._scheduler.join(timeout=max(self.grace, 5.0))
        # If the database is away, the dashboard shows the worker as silent until the reaper
        # forgets it.
        with contextlib.suppress(DatabaseError):
            transitions.forget_worker(self.worker_id)
        self._pool.join(timeout=0.1)

    def _abandon(self, jobs: list[Held]) -> None:
        for held in jobs:
            held.lease.abandoned = True  # no more beats: the lease runs out, the reaper decides
        self.abandoned = [h.claim for h in jobs]
        logger.warning(
            "grace period over with %s job(s) still running (%s): left to their leases",
            len(jobs), ", ".join(str(h.claim.id) for h in jobs),
            extra=logs.jobs_fields((h.claim.id for h in jobs), self.worker_id),
        )  # fmt: skip
        if self.exits_after_run:
            with contextlib.suppress(DatabaseError):
                transitions.cut_leases([(h.claim.id, h.claim.execution_id) for h in jobs], EXIT_MARGIN)

    def _report_alive(self) -> None:
        buffered, running, _ = self._pool.counts()
        # What this worker can run is said once, by its first report that gets through.
        job_types = None if self._types_reported else {n: t.version for n, t in self.job_types.items()}
        transitions.report_worker(
            job_types=job_types,
            worker_id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=",".join(self.queues),
            concurrency=self.concurrency,
            running=buffered + running,
            # dict.copy is one C call: safe while the main thread counts a new kind of outcome.
            processed=sum(dict.copy(self.stats.outcomes).values()),  # executions
        )
        self._types_reported = True

    def _flush_patiently(self, until: float | None = None) -> None:
        """Write buffered outcomes, retrying while the database is away until ``until``."""
        wait = _DB_RETRY_FIRST
        while True:
            try:
                self._flush(force=True)
                return
            except DATABASE_UNAVAILABLE as exc:
                if until is None or time.monotonic() >= until:
                    logger.error(
                        "could not write %s outcome(s); the reaper will recover those jobs",
                        len(self._finished),
                        extra=logs.jobs_fields((f.claim.id for f in self._finished), self.worker_id),
                    )
                    return
                wait = self._database_unavailable(exc, wait)
                time.sleep(wait)

    # ---- signals ------------------------------------------------------------------------------

    def _act_on_signals(self) -> None:
        """Stop as the signals received so far ask: the first drains, the second aborts."""
        if self._signals and not self._stopping.is_set():
            self.stop(reason=f"{self._signal_name} received")
        if self._signals > 1 and not self._abort.is_set():
            self.stop(abort=True)

    def _install_signal_handlers(self) -> None:
        if not self.handle_signals:
            return  # embedded use (tests, a thread of another program): the owner calls stop()

        def handle(signum: int, frame: FrameType | None) -> None:
            # No lock may be taken here: the handler runs on the main thread, between two of its
            # bytecodes, perhaps while it holds the very lock (an Event's, say): it would wait
            # for itself forever. The main thread acts on the count at its next turn.
            self._signals += 1
            self._signal_name = signal.Signals(signum).name
            logger.info(
                "%s received: %s",
                signal.Signals(signum).name,
                "no new claims, finishing running jobs"
                if self._signals == 1
                else "stop waiting for running jobs and exit",
                extra=logs.worker_fields(self.worker_id),
            )

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
