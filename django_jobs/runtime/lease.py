"""``Lease``: one execution's hold on its job, from the claim until its outcome is written.

It is the arithmetic of that hold, on this process's monotonic clock: whether a buffered
execution may still start (``may_start``), until when the database surely holds it
(``held_until``), when the heartbeat should write for it (``beat_due``, ``beat``) and what the
answer taught (``record_beat``), and the handler's deadline. The worker's heartbeat thread and
the handler's ``JobContext`` share one ``Lease``: the heartbeat learns whether the execution
still owns its job and whether cancellation was requested, and the context reports both to
the handler without a query.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from dataclasses import dataclass, field

from django_jobs import transitions
from django_jobs.conf import jobs_settings


@dataclass(eq=False)
class Lease:
    """One execution's hold on its job, from the claim until its outcome is written."""

    job_id: int
    execution_id: uuid.UUID
    #: Seconds each heartbeat extends the lease by.
    duration: float
    #: Whether the worker's heartbeat extends this lease (the type's ``heartbeat`` policy).
    beats: bool = True
    timeout: float | None = None
    #: Whether the database counts this execution as started (attempt counted, start recorded):
    #: true from the claim for a job taken for an idle thread, from the first beat or the
    #: outcome for a prefetched one.
    counted: bool = True
    #: Monotonic time of the last write that proved the execution alive (the claim counts).
    last_beat: float = field(default_factory=time.monotonic)
    #: The claim's time on the monotonic clock and on the database's (epoch seconds): the
    #: deadline a handler sees is in database time.
    claimed: float = field(default_factory=time.monotonic)
    claimed_db: float | None = None
    started: float | None = None  # monotonic start of the handler; None while buffered
    #: The handler returned; the lease lives on until its outcome is written (no deadline then).
    done: bool = False
    lost: bool = False
    #: The worker gave up waiting for this execution (shutdown past its grace): no more beats,
    #: so its lease runs out and the reaper decides; an outcome can still be written before.
    abandoned: bool = False
    cancel_requested: bool = False
    #: The execution committed a mark before an external call (``ctx.external_call``).
    marked_call: bool = False
    #: The execution this lease is held for and the worker running it: what its log lines
    #: name (see logs.py); None for a lease made without a claim.
    claim: transitions.Claim | None = field(default=None, repr=False)
    worker_id: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> None:
        self.started = time.monotonic()

    @property
    def held_until(self) -> float:
        """Monotonic time until which the database surely holds the lease of an execution that
        has not started (nothing extends it: see ``beat_due``).

        The claim set the lease to the database's ``now()`` + ``duration``, and that ``now()``
        is the start of the claim's transaction, which came after ``claimed`` (read before the
        claim was sent): so the lease lasts at least until ``claimed + duration`` on this clock,
        however far this machine's wall clock is from the database's.
        """
        return self.claimed + self.duration

    def may_start(self, now: float) -> bool:
        """Whether a slot may start this execution at ``now``: at least half its lease is left.

        A lease that lapsed while the job waited in the buffer may have been taken back by the
        reaper and handed to another worker: starting it would run the job twice (the stale
        execution's writes are fenced, its external effects are not). Half, not merely some:
        the heartbeat renews a running lease every half lease at most, so a job started with
        half its lease left has the same time ahead for its first beat as a running one has
        between two beats.
        """
        return now <= self.held_until - self.duration / 2

    @property
    def deadline(self) -> float | None:
        """Monotonic deadline of the handler, or None without a timeout or before the start."""
        if self.timeout is None or self.started is None:
            return None
        return self.started + self.timeout

    def past_deadline(self, now: float | None = None) -> bool:
        if self.done:
            return False
        deadline = self.deadline
        return deadline is not None and (now if now is not None else time.monotonic()) >= deadline

    def running(self) -> bool:
        """Whether the handler is executing now (started, not returned)."""
        return self.started is not None and not self.done

    def beat_due(self, now: float) -> bool:
        """Whether the heartbeat should write for this execution now (throttled to the interval).

        A buffered execution is not beaten for: the worker gives it back before its lease
        runs out. A running one is, at most every ``HEARTBEAT_INTERVAL`` (or half its lease):
        to extend its lease, or, when it may not be extended (no heartbeat for its type, past
        its deadline), only to learn of a cancel request and to record its start.
        """
        return (
            self.running()
            and not self.lost
            and not self.abandoned
            and now - self.last_beat >= min(jobs_settings.HEARTBEAT_INTERVAL, self.duration / 2)
        )

    def beat(self, now: float) -> transitions.Beat:
        """This execution's entry in a heartbeat statement."""
        extend = self.beats and not self.past_deadline(now)  # a heartbeat never hides endless work
        ran_for = None if self.counted or self.started is None else now - self.started
        return transitions.Beat(self.job_id, self.execution_id, self.duration if extend else 0.0, ran_for)

    def record_beat(self, owned: bool, cancel_requested: bool, at: float, beat: transitions.Beat) -> None:
        with self.lock:
            if owned:
                # Also after a poll that did not extend the lease: it only paces the next write.
                self.last_beat = at
                self.counted = self.counted or beat.ran_for is not None
                self.cancel_requested = self.cancel_requested or cancel_requested
            else:
                self.lost = True

    def deadline_at(self) -> dt.datetime | None:
        """The deadline in the database's time, or None."""
        deadline = self.deadline
        if deadline is None:
            return None
        base = self.claimed_db if self.claimed_db is not None else time.time()
        return dt.datetime.fromtimestamp(base + (deadline - self.claimed), dt.UTC)
