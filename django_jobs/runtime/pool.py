"""The supervised executor pool: threads that each run one claimed job at a time.

Every slot runs :func:`django_jobs.runtime.executor.execute`, which never raises, inside a loop that
catches anything left (a bug of ours, a ``BaseException`` from a finally clause), so a slot is
never lost to a job. The pool knows each slot's state:

- *idle*: waiting for a claimed job;
- *running*: its job started (the handler may be running for a long time: that is allowed);
- *stuck*: its job ran past its deadline (the type's ``timeout``) by more than
  ``STUCK_GRACE``. A thread cannot be killed: its lease is no longer extended (the reaper takes
  the job back), and a new thread takes over the slot, so the worker keeps its concurrency. At
  most ``concurrency`` stuck threads are carried; past that, the slot stays lost and the worker
  says so — a process pool (``runjobs --pool process``) can kill such a handler instead.

Jobs claimed beyond the idle slots wait in a buffer (prefetch). Prefetch is sized by the worker
from the slots that are expected to free up soon, and a buffered job that waited longer than
``max_buffer_wait`` is given back unstarted, so a slow or stuck slot never hoards jobs.

Every pool starts a job through ``ExecutorPool._start``: the worker's checks (a heartbeat
unanswered, a restore hold), the start-by deadline of a job that has one (past it, the job
ends ``cancelled``, code ``EXPIRED``, instead of starting), then ``_run``, the one step a pool
of another kind replaces.

Over 300 lines: the buffer, the slots, their running jobs and the stuck threads share one lock,
and each method is right only beside the others that read them under it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connections

from django_jobs import logs, transitions
from django_jobs.decision import Happened
from django_jobs.errors import DATABASE_UNAVAILABLE, ErrorCode
from django_jobs.registry import JobType
from django_jobs.runtime.executor import Finished, failed_outside_the_handler
from django_jobs.runtime.lease import Lease
from django_jobs.transitions import Claim

logger = logging.getLogger("django_jobs.pool")

#: Seconds past its deadline after which a running job's thread is declared stuck.
STUCK_GRACE = 1.0


def lease_for(
    claim: Claim,
    job_type: JobType,
    worker_id: str | None = None,
    sent_at: float | None = None,
    duration: float | None = None,
) -> Lease:
    """The lease of a claimed execution, on its type's terms, held by worker ``worker_id``.

    ``sent_at`` is the monotonic time just before the claim was sent: the database's lease
    started after it, so a lease counted from it never outlasts the database's (see
    ``Lease.held_until``). ``duration`` is the lease the claim gave (default: the type's).
    """
    claimed = time.monotonic() if sent_at is None else sent_at
    return Lease(
        claim.id,
        claim.execution_id,
        job_type.lease if duration is None else duration,
        beats=job_type.heartbeat,
        timeout=job_type.timeout,
        counted=claim.counted,
        claimed=claimed,
        last_beat=claimed,
        claimed_db=claim.claimed_at,
        claim=claim,
        worker_id=worker_id,
    )


@dataclass(eq=False)
class Held:
    """A claimed job in the pool: buffered until a slot takes it, then running."""

    claim: Claim
    lease: Lease
    buffered_at: float = field(default_factory=time.monotonic)


Execute = Callable[[Claim, Lease], Finished]
#: Whether a claimed job may start now: the worker's checks (see ``ExecutorPool._start``).
MayStart = Callable[[Claim], bool]


def end_if_expired(claim: Claim, lease: Lease) -> Finished | None:
    """End ``held``'s job if its start-by deadline has passed (a compare-and-set by the
    database's clock: ``transitions.expiry``); the execution then has nothing left to write
    (``happened`` None, code ``EXPIRED``). None: it may start. A database that cannot answer
    gives the job back unstarted: a job whose deadline cannot be checked does not start."""
    try:
        ended = transitions.expire_at_start(claim.id, claim.execution_id, claim.attempt - 1)
    except DATABASE_UNAVAILABLE:
        return Finished(claim, Happened.NOT_STARTED, ErrorCode.DATABASE_UNAVAILABLE)
    if not ended:
        return None
    logger.info(
        "job expired: not started by its start-by deadline id=%s execution=%s type=%s",
        claim.id, claim.execution_id, claim.type, extra=logs.lease_fields(lease),
    )  # fmt: skip
    return Finished(claim, None, ErrorCode.EXPIRED)


class ExecutorPool:
    def __init__(
        self,
        concurrency: int,
        execute: Execute,
        on_finished: Callable[[Finished], None],
        may_start: MayStart | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = concurrency
        self._execute = execute
        self._on_finished = on_finished
        self._may_start = may_start
        self._lock = threading.Condition()
        self._buffer: collections.deque[Held] = collections.deque()
        # Keyed by execution, not by job: a job taken back from a stuck thread may be claimed
        # again by this worker while the stuck thread still runs its old execution.
        self._running: dict[uuid.UUID, Held] = {}  # execution id → the job a slot is running
        self._threads: dict[int, threading.Thread] = {}  # slot → its current thread
        self._slot_of: dict[uuid.UUID, int] = {}  # execution id → slot running it
        self._stuck: list[tuple[threading.Thread, Held]] = []
        self._stopping = False
        self._spawned = 0

    # ---- the worker's side --------------------------------------------------------------------

    def start(self) -> None:
        for slot in range(self.concurrency):
            self._spawn(slot)

    def submit(self, held: list[Held]) -> None:
        with self._lock:
            self._buffer.extend(held)
            self._lock.notify(len(held))

    def counts(self) -> tuple[int, int, int]:
        """(buffered, running, idle slots)."""
        with self._lock:
            running = len(self._running)
            return len(self._buffer), running, self._live_slots() - running

    def running_low(self, refill_at: int = 0) -> bool:
        """Whether the buffer is down to ``refill_at`` jobs, or to what the running slots take
        next: time to claim.

        Read without the lock, on every finished job: a hint, and len() of a deque or a dict
        is atomic anyway.
        """
        return len(self._buffer) <= max(refill_at, len(self._running))

    def any_running(self) -> bool:
        """Whether a slot is running a job (a hint, read without the lock like running_low)."""
        return bool(self._running)

    def soon_free(self, busy_for: float) -> int:
        """Slots that are idle or whose job has run less than ``busy_for`` seconds."""
        now = time.monotonic()
        with self._lock:
            long_running = sum(1 for h in self._running.values() if now - (h.lease.started or now) > busy_for)
            return self._live_slots() - long_running

    def running_leases(self) -> list[Lease]:
        with self._lock:
            return [h.lease for h in self._running.values()]

    def running_jobs(self) -> list[Held]:
        with self._lock:
            return list(self._running.values())

    def take_buffered(self, older_than: float | None = None) -> list[Held]:
        """Remove buffered jobs (all, or those waiting longer than ``older_than`` seconds)."""
        now = time.monotonic()
        with self._lock:
            if older_than is None:
                taken, self._buffer = list(self._buffer), collections.deque()
                return taken
            # The buffer is in claim order, so the oldest are at its head.
            taken = []
            while self._buffer and now - self._buffer[0].buffered_at > older_than:
                taken.append(self._buffer.popleft())
            return taken

    def take_buffered_of(self, queues: set[str]) -> list[Held]:
        """Remove the buffered jobs of these queues (they were paused): none of them started."""
        with self._lock:
            taken = [held for held in self._buffer if held.claim.queue in queues]
            if taken:
                self._buffer = collections.deque(h for h in self._buffer if h.claim.queue not in queues)
            return taken

    def replace_stuck(self) -> list[Held]:
        """Declare stuck the slots whose job is past its deadline + ``STUCK_GRACE``; give each a
        new thread while fewer than ``concurrency`` stuck threads are carried. Returns the
        jobs newly declared stuck."""
        now = time.monotonic()
        declared: list[Held] = []
        with self._lock:
            self._stuck = [(t, h) for t, h in self._stuck if t.is_alive()]
            for execution_id, held in list(self._running.items()):
                deadline = held.lease.deadline
                if deadline is None or now < deadline + STUCK_GRACE:
                    continue
                slot = self._slot_of.pop(execution_id)
                del self._running[execution_id]
                self._stuck.append((self._threads[slot], held))
                declared.append(held)
                if len(self._stuck) <= self.concurrency:
                    self._spawn(slot)
                else:
                    del self._threads[slot]
                    logger.error(
                        "slot %s lost to a stuck job id=%s: %s stuck thread(s) carried already",
                        slot, held.claim.id, len(self._stuck) - 1, extra=logs.lease_fields(held.lease),
                    )  # fmt: skip
        for held in declared:
            logger.error(
                "job stuck past its deadline id=%s type=%s execution=%s: its lease runs out and "
                "the reaper takes it back; a new thread takes its slot",
                held.claim.id, held.claim.type, held.claim.execution_id, extra=logs.lease_fields(held.lease),
            )  # fmt: skip
        return declared

    def stuck(self, past: float) -> int:
        """Executions stuck now: threads declared stuck that still run their job, and jobs
        still running ``past`` seconds after their deadline (the liveness probe's count)."""
        now = time.monotonic()
        with self._lock:
            carried = sum(1 for thread, _ in self._stuck if thread.is_alive())
            late = sum(1 for held in self._running.values() if held.lease.past_deadline(now - past))
        return carried + late

    def stop(self) -> None:
        """No slot takes a new job from now on (jobs already running go on)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def interrupt(self) -> bool:
        """Stop the running executions now, if this pool can (a thread cannot be stopped)."""
        return False

    # ---- the slots ----------------------------------------------------------------------------

    def _start(self, slot: int, held: Held) -> Finished:
        """The one start path of every pool: the worker's checks (``may_start``: a heartbeat
        unanswered, a restore hold open for the job's type), then the job runs in ``slot``
        (``_run``: here a thread, in the process pool a child). A subclass runs jobs elsewhere
        by overriding ``_run``; the checks stay here, so that no pool can start a job another
        would have held. A job refused is given back unstarted and uncounted."""
        if self._may_start is not None and not self._may_start(held.claim):
            return Finished(held.claim, Happened.NOT_STARTED)
        if held.claim.has_deadline:
            expired = end_if_expired(held.claim, held.lease)
            if expired is not None:
                return expired
        return self._run(slot, held)

    def _run(self, slot: int, held: Held) -> Finished:
        """Run one job in ``slot``; here, on the slot's own thread."""
        return self._execute(held.claim, held.lease)

    def _live_slots(self) -> int:
        return len(self._threads)

    def _spawn(self, slot: int) -> None:
        self._spawned += 1
        name = f"django_jobs-executor-{slot}.{self._spawned}"
        thread = threading.Thread(target=self._slot_loop, args=(slot,), name=name, daemon=True)
        self._threads[slot] = thread
        thread.start()

    def _give_back_lapsing(self, held: Held) -> None:
        """Give back, unstarted, a buffered job whose lease is lapsing (see ``Lease.may_start``).

        The check is made here, by the slot, at the moment it would start the job, because the
        main thread gives back overdue buffered jobs only when it turns, and a slot that frees
        up in between would otherwise start a job another worker may own by now. Checking the
        lease that the claim itself returned costs no statement; extending the leases of
        buffered jobs with the heartbeat would cost a write per job and let a worker whose
        slots are stuck hoard them. The release is a guarded write: if the reaper took the job
        back already, it changes nothing.
        """
        logger.info(
            "giving back a prefetched job whose lease is lapsing id=%s execution=%s",
            held.claim.id, held.claim.execution_id, extra=logs.lease_fields(held.lease),
        )  # fmt: skip
        self._on_finished(Finished(held.claim, Happened.NOT_STARTED))

    def _slot_loop(self, slot: int) -> None:
        me = threading.current_thread()
        try:
            while True:
                with self._lock:
                    while not self._buffer and not self._stopping and self._threads.get(slot) is me:
                        self._lock.wait()
                    if self._stopping or not self._buffer or self._threads.get(slot) is not me:
                        return
                    held = self._buffer.popleft()
                    startable = held.lease.may_start(time.monotonic())
                    if startable:
                        self._running[held.claim.execution_id] = held
                        self._slot_of[held.claim.execution_id] = slot
                if not startable:
                    self._give_back_lapsing(held)
                    continue
                try:
                    finished = self._start(slot, held)
                except BaseException as exc:  # execute() never raises; if it did, the slot lives on
                    logger.exception(
                        "executor error id=%s", held.claim.id, extra=logs.lease_fields(held.lease)
                    )
                    finished = failed_outside_the_handler(held.claim, exc)
                with self._lock:
                    mine = self._slot_of.get(held.claim.execution_id) == slot
                    if mine:
                        del self._running[held.claim.execution_id]
                        del self._slot_of[held.claim.execution_id]
                # A thread declared stuck meanwhile reports too: its outcome is written only if
                # its lease still holds (guarded write). Then it ends: its slot has a new thread.
                self._on_finished(finished)
                if not mine:
                    return
        finally:
            connections.close_all()
