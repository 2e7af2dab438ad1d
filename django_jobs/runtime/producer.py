"""The producer: claims jobs for the pool, and gives back what the pool should not keep.

It claims only when there is room: one job per live slot, plus a prefetch while jobs are short
(see ``PREFETCH_SECONDS``; the handlers' run time is an EWMA), up to two batches; with queue
slots, no queue holds more than its slots. It claims nothing while the jobs database refuses
executors (a back-off, :class:`~django_jobs.runtime.outage.Outage`), while the outcome writer holds
outcomes it cannot write, or while the heartbeat goes unanswered (:mod:`~django_jobs.runtime.holdback`:
a job started now could not keep its lease). While a restore hold is open, it claims no job of a
type whose effects may be outside the database (:mod:`~django_jobs.runtime.restore_watch`).

It gives back, unstarted and with their attempts untouched, the prefetched jobs that waited too
long for a slot, those of queues paused since their claim, and all of them while it holds back.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django_jobs import logs, transitions
from django_jobs.conf import jobs_settings
from django_jobs.decision import Happened
from django_jobs.job_types import JobType
from django_jobs.observe.liveness import Liveness
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.holdback import HoldBack
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.outage import Outage
from django_jobs.runtime.pool import ExecutorPool, Held, lease_for
from django_jobs.runtime.restore_watch import RestoreWatch
from django_jobs.runtime.started import read_after_claim
from django_jobs.runtime.stats import WorkerStats
from django_jobs.runtime.writer import OutcomeWriter
from django_jobs.transitions import Claim, claim_statement

logger = logging.getLogger("django_jobs.worker")


@dataclass(frozen=True)
class ProducerTurn:
    """What one turn of the producer did: jobs claimed, and prefetched jobs given back."""

    claimed: int = 0
    given_back: int = 0


class Producer:
    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        queue_slots: dict[str, int] | None,
        concurrency: int,
        batch_size: int,
        job_types: dict[str, JobType],
        pool: ExecutorPool,
        writer: OutcomeWriter,
        hold_back: HoldBack,
        restore_watch: RestoreWatch,
        liveness: Liveness,
        stats: WorkerStats,
        stopping: threading.Event,
        wake: threading.Event,
    ) -> None:
        self._worker_id = worker_id
        self._queues = list(queues)
        self._queue_slots = queue_slots
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._job_types = job_types
        self._pool = pool
        self._writer = writer
        self._hold_back = hold_back
        self._restore_watch = restore_watch
        self._liveness = liveness
        self._stats = stats
        self._stopping = stopping
        self._wake = wake
        # Each type's lease, read once: per claimed job, it cost more than the rest of its Lease.
        self._leases = {name: t.lease for name, t in job_types.items()}
        self.statement = claim_statement(worker_id, self._queues, job_types.values())
        self._rate_windows_open = not self.statement.rate_limited
        # While a restore hold is open: the claim of the types whose effects stay in the database.
        inside = {name: t for name, t in job_types.items() if name not in restore_watch.outside}
        self._while_held = claim_statement(worker_id, self._queues, inside.values()) if inside else None
        # How long a prefetched job may wait for a slot before it is given back: within the
        # shortest lease (a buffered job's lease is not extended), and long enough that a brief
        # stall does not throw a prefetch away. A slot also refuses, by itself, a job with less
        # than half its lease left (Lease.may_start): this wait may be longer than that with
        # short leases, and the claim loop looks only when it turns.
        shortest_lease = min([t.lease for t in job_types.values()] or [jobs_settings.LEASE_TIMEOUT])
        self.buffer_wait = max(10 * jobs_settings.PREFETCH_SECONDS, min(5.0, shortest_lease / 3))
        self._lock = threading.Lock()
        self.avg_duration: float | None = None  # EWMA of handler run time, seconds
        self.outage_until = 0.0  # no claims before this (monotonic): the database refused us
        self._refused = Outage()  # how long the next refusal holds claims off, under _lock
        self._held_by_queue: collections.Counter[str] = collections.Counter()  # under _lock
        self._turn = 0  # which served queue comes first in the next claim
        # Queues the listener heard paused, whose prefetched jobs are to be given back.
        self._paused: set[str] = set()
        # The slots ask for more once the buffer is down to this many jobs.
        self.refill_at = 0
        # Whether claims start where the last ones stopped, as last logged.
        self._remembering = False
        stats.positions = self.statement.positions

    def run_once(self) -> ProducerTurn:
        """One turn: give back what should not wait, then claim if there is room.

        The claim loop takes the two halves apart (:meth:`give_back_due`, then
        :meth:`claim_if_room` when the wake-up says a claim may find something); this is them
        together, as a turn that always claims. Raises what an unreachable database raises.
        """
        given_back = self.give_back_due()
        return ProducerTurn(claimed=self.claim_if_room(), given_back=given_back)

    # ---- claiming ------------------------------------------------------------------------------

    def claim_if_room(self) -> int:
        """Claim what there is room for, hand it to the pool; returns how many were claimed."""
        if self._stopping.is_set() or time.monotonic() < self.outage_until:
            return 0
        if not self._hold_back.may_start_jobs():
            self._stats.held_back += 1
            return 0
        if self._writer.holds_back_claims:
            # What this worker ran is still unwritten: a job claimed now would finish into the
            # same queue, and its lease would run out waiting (then it runs again elsewhere).
            return 0
        buffered, running, idle = self._pool.counts()
        target = self.claim_target()
        held = buffered + running
        # With a prefetch, claim again at half (batches stay large), never leaving a slot idle.
        if held >= target or (idle <= buffered and held > target // 2):
            return 0
        statement = self.statement
        if self._restore_watch.held and self._restore_watch.outside:
            if self._while_held is None:
                return 0  # every type it runs waits for the restore hold's release
            statement = self._while_held
        if not self._rate_windows_open:
            transitions.open_rate_windows(self.statement.rate_limited)
            self._rate_windows_open = True
        limit, rooms = min(self._batch_size, target - held), None
        if self._queue_slots is not None:
            with self._lock:
                rooms = [max(0, self._queue_slots[q] - self._held_by_queue[q]) for q in self._queues]
            limit = min(limit, sum(rooms))
            if not limit:
                return 0
        sent_at, started = time.monotonic(), time.perf_counter()
        self._turn += 1
        claims = transitions.claim(
            statement, limit, start_now=max(0, idle - buffered), rooms=rooms, turn=self._turn
        )
        elapsed = time.perf_counter() - started
        self._liveness.database_answered()
        self._stats.claims += 1
        self._note_positions()
        if not claims:
            return 0
        self._stats.claim_seconds.append(elapsed)
        if self._stats.first_claim_at is None:
            self._stats.first_claim_at = time.monotonic()
        self._stats.claimed += len(claims)
        read_after_claim(claims)
        if self._queue_slots is not None:
            with self._lock:
                self._held_by_queue.update(c.queue for c in claims)
        self._pool.submit([Held(c, self.lease_for(c, sent_at)) for c in claims])
        return len(claims)

    def _note_positions(self) -> None:
        """Say when claims start where the last ones stopped, and when they no longer do."""
        positions = self.statement.positions
        if positions.remembering != self._remembering:
            self._remembering = positions.remembering
            level = logging.WARNING if positions.remembering else logging.INFO
            fields = {**logs.worker_fields(self._worker_id), "dead_entries": positions.walked}
            logger.log(level, positions.describe(), extra=fields)

    def lease_for(self, claim: Claim, sent_at: float | None = None) -> Lease:
        job_type = claim.type
        return lease_for(claim, self._job_types[job_type], self._worker_id, sent_at, self._leases[job_type])

    def claim_target(self) -> int:
        """How many jobs to hold: one per live slot, plus what the slots that should free up
        soon finish in PREFETCH_SECONDS, up to two batches (the slots run one while the next
        is claimed). Sets the level at which the slots ask for more: half of it."""
        if self.avg_duration is None:
            target = self._concurrency
        else:
            # A slot busy for far longer than jobs usually take (a stuck call, a long job) is
            # not expected to take buffered jobs soon: it gets no prefetch.
            soon = self._pool.soon_free(busy_for=max(1.0, 10 * self.avg_duration))
            per_slot = jobs_settings.PREFETCH_SECONDS / max(self.avg_duration, 1e-6)
            target = max(
                self._concurrency, min(2 * self._batch_size, self._concurrency + int(soon * per_slot))
            )
        self.refill_at = target // 2
        return target

    def ran(self, duration: float) -> None:
        """A handler ran for ``duration`` seconds: the prefetch follows, and the database answered."""
        d = duration
        self.avg_duration = d if self.avg_duration is None else 0.8 * self.avg_duration + 0.2 * d
        self._refused.answered()

    def back_off_claims(self) -> None:
        """The jobs database refused an executor: claim nothing for a while, longer each time."""
        with self._lock:
            wait = self._refused.failed()
            self.outage_until = max(self.outage_until, time.monotonic() + wait)
        logger.warning(
            "jobs database refused an executor: no claims for %.1fs",
            wait,
            extra=logs.worker_fields(self._worker_id),
        )

    # ---- giving back ---------------------------------------------------------------------------

    def give_back_due(self) -> int:
        """Give back what should not wait any more: overdue, of paused queues, unstartable."""
        return self.give_back_overdue() + self.give_back_paused() + self.give_back_unstartable()

    def give_back_overdue(self) -> int:
        """Give back buffered jobs no slot took in time, and notice stuck slots."""
        overdue = self._pool.take_buffered(older_than=self.buffer_wait)
        if overdue:
            logger.info(
                "giving back %s prefetched job(s) no slot took in time", len(overdue),
                extra=logs.jobs_fields((h.claim.id for h in overdue), self._worker_id),
            )  # fmt: skip
            self.give_back(overdue)
        self._stats.stuck += len(self._pool.replace_stuck())
        return len(overdue)

    def note_paused(self, queue: str) -> None:
        """The listener heard that ``queue`` was paused: its next claims skip it already; what
        was prefetched of it goes back at the next turn."""
        with self._lock:
            self._paused.add(queue)
        self._wake.set()

    def paused_found(self, queues: set[str]) -> None:
        """The outlook found these queues paused: give back what was prefetched of them now."""
        with self._lock:
            self._paused |= queues
        self.give_back_paused()

    def give_back_paused(self) -> int:
        """Give back the prefetched jobs of queues paused since their claim: a pause stops
        what has not started; what runs finishes."""
        with self._lock:
            paused, self._paused = self._paused, set()
        held = self._pool.take_buffered_of(paused) if paused else []
        if held:
            logger.info(
                "giving back %s prefetched job(s) of paused queue(s) %s", len(held), ",".join(sorted(paused)),
                extra=logs.jobs_fields((h.claim.id for h in held), self._worker_id),
            )  # fmt: skip
            self.give_back(held)
        return len(held)

    def give_back_unstartable(self) -> int:
        """While no job may start, what was prefetched goes back (or to the reaper, if the
        database is away: its lease runs out, and it never ran)."""
        if self._hold_back.may_start_jobs():
            return 0
        held = self._pool.take_buffered()
        if held:
            self.give_back(held)
        return len(held)

    def give_back(self, held: list[Held]) -> None:
        """Release buffered jobs that never started: pending again at once, attempts untouched."""
        self.let_go([h.claim for h in held])
        self.hand_over([Finished(h.claim, Happened.NOT_STARTED) for h in held])

    def hand_over(self, finished: list[Finished]) -> bool:
        """Queue outcomes for the writer, and claim more if the slots run low; False once the
        writer is closed (nobody writes)."""
        if not self._writer.add(finished):
            return False
        if self._pool.running_low(self.refill_at):
            self._wake.set()
        return True

    def let_go(self, claims: list[Claim]) -> None:
        """These jobs no longer hold a slot of their queue (counted only when queues have slots:
        this runs for every job)."""
        if self._queue_slots is None:
            return
        with self._lock:
            self._held_by_queue.subtract(c.queue for c in claims)
