"""The worker: claims jobs in batches, hands them to the executor pool, writes outcomes in
batches, and shuts down without ever letting two executions of a job run at once.

Threads and their roles:
- the *main* thread turns the claim loop: the producer (:mod:`django_jobs.runtime.producer`)
  claims (one statement per batch) and gives back what the pool should not keep, the wake-up
  (:mod:`django_jobs.runtime.wakeup`) says when to turn again; it handles signals and the ordered
  stop, and owns one database connection;
- the *outcome writer* (:mod:`django_jobs.runtime.writer`) writes what the slots finished through
  :mod:`django_jobs.runtime.outcomes` (one statement per batch), on a connection of its own: the
  next claim, the jobs running and the last batch's outcomes overlap instead of waiting for each
  other;
- the *executor pool* (:mod:`django_jobs.runtime.pool`): N slots, each running one job at a time on its
  own database connection, supervised;
- the *heartbeat* thread extends leases and runs the executions' side writes;
- the *reaper* thread, unless ``--no-reaper``;
- the *scheduler* thread (:mod:`django_jobs.maintenance.periodic`) when schedules are declared, unless the
  worker drains and exits (``--burst``) or is told not to (``schedules=False``).

A claimed job is either running in a slot or waiting in the pool's buffer. The worker claims
beyond its idle slots only while jobs are short (see ``PREFETCH_SECONDS``), and only for slots
that should free up soon, so a burst of no-op jobs costs two statements per batch while a long
or stuck job never hoards others; a job that waited in the buffer too long is given back. With
short jobs it holds up to two batches and claims the next once half are done, so the slots
never wait for a claim.

This module is the supervisor: :class:`Worker` builds those services, starts them, turns the
claim loop, and stops them in order (drain, grace, abandon, cut leases). Each service lives in a
module of its own; what the worker does with a finished job (``_record``) is here because the pool
calls it, and it touches three of them.

Over 300 lines: the constructor documents each option and wires eleven services
whose callbacks point at one another, and the ordered stop is one sequence across all of them that
reads best in one place. What is left here decides nothing a service could decide alone.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Sequence
from types import FrameType

from django.db import Error as DatabaseError  # every database error, InterfaceError included

from django_jobs import logs, signals, transitions
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened
from django_jobs.errors import DATABASE_UNAVAILABLE, ErrorCode
from django_jobs.maintenance.periodic import SchedulerLoop
from django_jobs.maintenance.reaper import ReaperLoop
from django_jobs.observe.liveness import Liveness
from django_jobs.observe.metrics import Recorder, guarded, otel_recorder
from django_jobs.observe.metrics import recorder as metrics_recorder  # `metrics` is Worker's flag
from django_jobs.observe.probes import HealthFile
from django_jobs.registry import declared_schedules, registry
from django_jobs.runtime import connectivity
from django_jobs.runtime.executor import Finished, execute
from django_jobs.runtime.heartbeat import Heartbeat
from django_jobs.runtime.holdback import HoldBack
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.outage import Outage
from django_jobs.runtime.pool import ExecutorPool, Held, lease_for
from django_jobs.runtime.presence import Presence, make_worker_id
from django_jobs.runtime.producer import Producer
from django_jobs.runtime.restore_watch import RestoreWatch
from django_jobs.runtime.started import send_job_started
from django_jobs.runtime.stats import SUMMARY_INTERVAL, Summaries, WorkerStats
from django_jobs.runtime.wakeup import Wakeup
from django_jobs.runtime.writer import OutcomeWriter
from django_jobs.transitions import Claim

__all__ = ["EXIT_MARGIN", "POOLS", "SUMMARY_INTERVAL", "Worker", "WorkerStats", "lease_for", "make_worker_id"]

logger = logging.getLogger("django_jobs.worker")

#: Seconds left on the lease of an execution still running when its process exits.
EXIT_MARGIN = 2.0
#: Where handlers run: threads of the worker, or child processes it can kill (process_pool.py).
POOLS = ("thread", "process")
#: At most this long between a SIGTERM and the worker acting on it, when it is idle.
_SIGNAL_LATENCY = 0.5


class Worker:
    """A worker, in the calling process: ``runjobs`` builds one, and so can a program of yours.

    :meth:`run` works on the calling thread until :meth:`stop` is called from another thread
    (not from a signal handler: it takes locks), or, with ``burst``, until nothing is claimable, or, with
    ``until_settled``, until nothing it serves is pending or running; it returns 0 once every
    outcome is written. The options are ``runjobs``'s: ``queues``, ``concurrency``,
    ``queue_slots`` (``--queue NAME=SLOTS``), ``pool`` (``"thread"`` or ``"process"``),
    ``grace``, ``batch_size``, ``max_jobs_per_child``, ``max_child_memory_mb``. Unlike
    ``runjobs``, it handles no signal unless ``handle_signals`` (only from the main thread), runs
    no reaper unless ``reap``, and, since the process lives on, never cuts the leases of the
    executions it stopped waiting for. ``stats`` counts what it did; ``liveness`` says whether
    it is alive and useful (the probes read it).
    """

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
        schedules: bool = True,
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
        self._wake = threading.Event()  # the claim loop has something to look at
        self._stopping = threading.Event()  # first signal: stop claiming, drain
        self._abort = threading.Event()  # second signal or grace over: stop waiting
        self._signals = 0  # SIGTERM / SIGINT received, counted by the handler
        self._signal_name = "a signal"
        self._outage = Outage()  # the claim loop's, while the database is away
        self._presence = Presence(
            worker_id=self.worker_id,
            queues=self.queues,
            concurrency=concurrency,
            pool=pool,
            mode=" until settled" if until_settled else " in burst mode" if burst else "",
            job_types=self.job_types,
            stats=self.stats,
            holding=self._holding,
        )
        self._restore_watch = RestoreWatch(worker_id=self.worker_id, job_types=self.job_types)
        self._heartbeat = Heartbeat(self._running_leases, report=self._report)
        self.pool = pool
        self._pool: ExecutorPool
        if pool == "process":
            # Imported here: multiprocessing is loaded only by workers that run handlers in children.
            from django_jobs.runtime.process_pool import ProcessPool

            self._pool = ProcessPool(
                concurrency,
                self._record,
                max_jobs=max_jobs_per_child,
                max_memory_mb=max_child_memory_mb,
                on_start=self._started,
                may_start=self._may_start,
            )
        else:
            self._pool = ExecutorPool(concurrency, self._execute, self._record, may_start=self._may_start)
        #: Counters and histograms of this worker's executions: Prometheus's with
        #: ``runjobs --metrics-port``, else OpenTelemetry's when a meter provider is set; None
        #: when off, so that each job pays one attribute check. Guarded: a meter that raises is
        #: logged, and the job it measures goes on.
        self._metrics: Recorder | None = guarded(metrics_recorder() if metrics else otel_recorder())
        self._reaper = (
            ReaperLoop(stop=self._stopping, on_pass=self._metrics.on_reaped if self._metrics else None)
            if reap
            else None
        )
        #: What the probes ask: is this worker alive and useful, can it take work.
        self.liveness = Liveness(
            slots=concurrency,
            stuck=self._pool.stuck,
            heartbeat=self._heartbeat.turned_at,
            restore_held=self._restore_watch.holding,
        )
        self._heartbeat.on_database = self._database_seen
        self._health_file = health_file
        # A worker that drains and exits fires no schedule: its ticks would never settle. Nor
        # does one told not to (``schedules=False``: the self-test's workers, which enqueue
        # nothing outside their queue).
        self._scheduler = (
            SchedulerLoop(stop=self._stopping, worker_id=self.worker_id)
            if schedules and not (burst or until_settled) and declared_schedules()
            else None
        )
        self._writer = OutcomeWriter(
            pool=self._pool,
            stats=self.stats,
            worker_id=self.worker_id,
            batch_size=self.batch_size,
            wake=self._wake,
            metrics=self._metrics,
        )
        self._hold_back = HoldBack(
            heartbeat=self._heartbeat,
            job_types=self.job_types,
            worker_id=self.worker_id,
            answered_again=self._database_answered_again,
        )
        self._producer = Producer(
            worker_id=self.worker_id,
            queues=self.queues,
            queue_slots=self.queue_slots,
            concurrency=concurrency,
            batch_size=self.batch_size,
            job_types=self.job_types,
            pool=self._pool,
            writer=self._writer,
            hold_back=self._hold_back,
            restore_watch=self._restore_watch,
            liveness=self.liveness,
            stats=self.stats,
            stopping=self._stopping,
            wake=self._wake,
        )
        # A worker that runs until stopped listens; one that drains and exits polls.
        self._wakeup = Wakeup(
            queues=self.queues,
            statement=self._producer.statement,
            pool=self._pool,
            writer=self._writer,
            wake=self._wake,
            stopping=self._stopping,
            paused_heard=self._producer.note_paused,
            paused_found=self._producer.paused_found,
            burst=burst,
            listen=jobs_settings.NOTIFY and not (burst or until_settled),
        )
        self._summaries = Summaries(self.stats, self.worker_id, holding=self._holding)

    # ---- public -----------------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, with ``burst``, until nothing is claimable). Returns 0."""
        with connectivity.worker_statements():  # the claim loop's connection: bounded statements
            return self._work()

    def _work(self) -> int:
        self._install_signal_handlers()
        self._pool.start()
        self._writer.start()
        self._presence.log_start()
        # Before the first claim: is this the database the workers left? If it does not answer,
        # jobs of external types wait until the heartbeat's look gets through.
        with contextlib.suppress(*DATABASE_UNAVAILABLE):
            self._restore_watch.run_once()
        self._heartbeat.start()
        self._wakeup.start()
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

    @property
    def holding_back(self) -> bool:
        """Whether the worker starts no job now: its heartbeat has gone unanswered for as long
        as the shortest lease (a network cut, a stuck connection)."""
        return not self._hold_back.may_start_jobs()

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
        producer, writer = self._producer, self._writer
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
                if not writer.alive:
                    writer.flush(force=False)  # the writer died of a bug of ours: write here
                producer.give_back_due()
                # A turn that only looks at the signals (see below) claims nothing.
                looked = woken or time.monotonic() >= claim_at
                # Whether the claim may run at all: with jobs held, it declines for want of room,
                # and what it then returns says nothing about what is pending, even if the held
                # jobs finish before the counts below are taken.
                emptied = looked and self._pool.counts()[:2] == (0, 0)
                claimed = self._wakeup.claim_and_look(woken, producer.claim_if_room) if looked else 0
                self._outage.answered()
            except DATABASE_UNAVAILABLE as exc:
                self.liveness.database_lost()
                self._outage.wait_out(exc, until=self._stopping, worker_id=self.worker_id)
                continue
            buffered, running, idle = self._pool.counts()
            if claimed and idle > buffered:
                # Slots are left idle although the claim found jobs: it may have passed over
                # jobs of a busy concurrency key that filled its batch. Look again at once; a
                # claim that finds nothing ends this.
                continue
            # A batch being written counts: a retry it writes may be claimable at once.
            unwritten = writer.unwritten
            settled = emptied and not buffered and not running and claimed == 0 and not unwritten
            # A claim held back for an unanswered heartbeat says nothing about what is pending.
            settled = settled and not self._hold_back.holding_back
            if settled and time.monotonic() >= producer.outage_until:
                if (self.burst or self.until_settled) and not producer.statement.positions.last_swept:
                    # The claim read from where the last ones stopped (vacuum is held back, see
                    # transitions.positions): only one that reads every kind from its head tells
                    # that nothing is left.
                    producer.statement.positions.want_sweep()
                    woken = True
                    continue
                if self.burst:
                    self.stop_reason = "nothing left to claim (burst)"
                    return
                if self.until_settled and self._nothing_active():
                    self.stop_reason = "no job pending or running (until settled)"
                    return
            self._summaries.log_if_due()
            # Slots wake this thread when they run low on claimed jobs, the listener when a job
            # becomes pending; otherwise there is nothing to do before the next flush, the next
            # scheduled job, or the next poll. A signal handler cannot wake it (it may take no
            # lock), so an idle wait is cut into turns short enough to act on signals soon.
            wait = self._wakeup.idle_wait(
                stall=self.liveness.limits.stall,
                holding_back=self._hold_back.holding_back,
                outage_until=producer.outage_until,
            )
            # A turn that did not look keeps the time it waits for (or comes earlier, for a
            # timer): pushing it back at every turn would never get there.
            claim_at = time.monotonic() + wait if looked else min(claim_at, time.monotonic() + wait)
            woken = self._wake.wait(min(wait, _SIGNAL_LATENCY) if self.handle_signals else wait)

    def _nothing_active(self) -> bool:
        """No job this worker could ever run is pending (now or later) or running."""
        return not transitions.any_active(types=list(self.job_types), queues=self.queues)

    def _report(self) -> None:
        """The heartbeat's report, every heartbeat interval and at once after a reconnect: the
        live-worker row, then a look for a restored database."""
        self._presence.report_alive()
        self._restore_watch.run_once()

    def _holding(self) -> int:
        buffered, running, _ = self._pool.counts()
        return buffered + running

    # ---- the pool's side (executor threads) -----------------------------------------------------

    def _may_start(self, claim: Claim) -> bool:
        """Whether a claimed job may start now; every pool's slots ask before they start one
        (``ExecutorPool._start``). Not while the heartbeat has gone unanswered for a lease (its
        lease may be another worker's by now), nor, for a type that may act outside the
        database, while a restore hold is open (it was claimed before this worker knew)."""
        return self._hold_back.may_start_jobs() and self._restore_watch.may_start(claim.type)

    def _execute(self, claim: Claim, lease: Lease) -> Finished:
        """Run a job in the thread pool's slot (the checks were made: ``_may_start``)."""
        return execute(claim, lease, side_writer=self._heartbeat, on_start=self._started)

    def _started(self, claim: Claim) -> None:
        """An execution is about to run its handler: count it, and tell ``job_started``'s
        receivers, if any."""
        if self._metrics is not None:
            self._metrics.on_started(claim)
        if signals.listened(signals.job_started):
            send_job_started(claim, self.worker_id)

    def _record(self, finished: Finished) -> None:
        """Called by a slot when its job ended."""
        self._producer.let_go([finished.claim])
        if finished.error_code == ErrorCode.DATABASE_UNAVAILABLE and finished.happened in (
            Happened.NOT_STARTED,
            Happened.OUTAGE,
        ):
            self._producer.back_off_claims()
        elif finished.ran_for is not None:
            self._producer.ran(finished.ran_for)
        if finished.happened is None:
            if finished.error_code == ErrorCode.EXPIRED:  # ended by the start path: never ran
                self.stats.expired += 1
            else:
                self.stats.lost += 1
            if self._metrics is not None:
                self._metrics.on_finished(finished, None)
            return
        if not self._producer.hand_over([finished]):
            # An execution the worker stopped waiting for (shutdown past its grace) ended
            # after all: write its outcome here; the guarded write lands only if its lease
            # was not taken over meanwhile.
            self._writer.write_late(finished)

    def _database_answered_again(self) -> None:
        """The heartbeat got through after holding back: a writer waiting out its back-off
        retries at once, before the leases of the executions it holds run out and their jobs
        are handed to another worker to run again; the claim loop claims."""
        self._writer.database_answered()
        self._wake.set()

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
        self._producer.give_back(self._pool.take_buffered())
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
                self._writer.flush(force=True)
            if self._health_file is not None:
                self._health_file.turn(self.liveness)  # draining within the grace is healthy
            self._wake.wait(0.05)
            self._wake.clear()
        # A writer stuck on an unreachable database does not hold the shutdown: the flushes
        # below take what it has not taken (it writes its own batch if it ever can).
        self._writer.stop(timeout=max(self.grace, 5.0))
        self._writer.flush_patiently(until=time.monotonic() + max(self.grace, 5.0), stopping=self._stopping)
        self._writer.close()
        # What arrived while closing.
        self._writer.flush_patiently(until=time.monotonic(), stopping=self._stopping)
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
