"""``JobContext``: what a handler knows about the execution it runs in, and what it may do.

Its ``Lease`` is shared with the worker's heartbeat thread: the heartbeat learns whether the
execution still owns its job and whether cancellation was requested, and the context reports
both to the handler without a query.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from django_jobs import effects, transitions
from django_jobs.conf import jobs_settings
from django_jobs.errors import DeadlineExceeded, InvalidCheckpoint, InvalidProgress, JobCancelled
from django_jobs.jsonvalues import bounded_problem, encode, plain_json_problem

T = TypeVar("T")


class LeaseLost(Exception):
    """This execution no longer owns its job (it was recovered and handed to another worker).

    Raised by the context; the handler should let it propagate. Nothing this execution reports
    is written: the job's state belongs to the new owner.
    """


class SideWriter(Protocol):
    """Runs a write of the execution (heartbeat, progress, checkpoint) outside the handler's
    own transaction, on the worker's connection, and returns its result or raises its error."""

    def run(self, write: Callable[[], T]) -> T: ...


class InlineWriter:
    """Runs side writes on the calling thread (no worker around: tests, a shell)."""

    def run(self, write: Callable[[], T]) -> T:
        return write()


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


class JobContext:
    """Passed to every handler as its first argument.

    ``attempt`` counts executions that started, this one included (1 on the first run).
    ``deadline`` is the time (by the database's clock) after which the execution is treated as
    timed out, or ``None``; give the handler's blocking calls timeouts derived from
    :meth:`time_left`.

    ``heartbeat()``, ``progress()`` and ``save_checkpoint()`` write through the worker's own
    connection, not the handler's: called inside the handler's ``transaction.atomic()``, they
    neither wait for it nor lock the job row until it commits (which would stall the
    heartbeat of every other job of the worker), and they are durable at once.
    """

    def __init__(
        self,
        *,
        job_id: int,
        type: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        execution_id: uuid.UUID,
        unique_key: str | None = None,
        checkpoint: Any = None,
        lease: Lease,
        side_writer: SideWriter | None = None,
        external_calls: tuple[str, ...] = (),
    ) -> None:
        self.job_id = job_id
        self.type = type
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.execution_id = execution_id
        self.unique_key = unique_key
        #: The last checkpoint saved by an earlier execution of this job, or None.
        self.checkpoint = checkpoint
        self._lease = lease
        self._writer: SideWriter = side_writer or InlineWriter()
        self._external_calls = external_calls
        #: When the execution is treated as timed out, in the database's time; or None.
        self.deadline: dt.datetime | None = lease.deadline_at()
        self._last_progress = 0.0

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def time_left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without a deadline."""
        deadline = self._lease.deadline
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def idempotency_key(self, *parts: object, anchor: str | None = None) -> str:
        """A key that is the same for every attempt of this job, e.g. for an Idempotency-Key header.

        Anchor it on the business operation: ``ctx.idempotency_key(anchor=f"order:{order_id}")``
        is the same for every job of this type that charges that order, so a second job for
        the same order (a double click, an operator's re-enqueue) sends the key the provider
        already saw and gets the first charge back instead of making another. A deliberate
        second operation needs an anchor of its own (a payment id, say).

        Without ``anchor``, the key is built from the job's ``unique_key`` if it has one, else
        from the job id: the same across retries of this job, but two jobs for one order send
        two different keys (both may charge), and every later job enqueued with the same
        ``unique_key`` reuses the key (a deliberate second charge gets the first one's result).

        The key is ``type:anchor:parts…``; never built from the attempt or the execution, which
        change on every retry. Raises ``ValueError`` for an ``anchor`` that is not a non-empty
        string.
        """
        if anchor is None:
            anchor = self.unique_key if self.unique_key is not None else f"job-{self.job_id}"
        elif not isinstance(anchor, str) or not anchor.strip():
            raise ValueError(
                f"anchor must be a non-empty string naming the business operation, not {anchor!r}"
            )
        return ":".join([self.type, anchor, *(str(p) for p in parts)])

    def effect(self, key: str) -> AbstractContextManager[bool]:
        """``effects.once(key)`` recorded with this job: a database-local effect, at most once.

        ::

            with ctx.effect(f"invoice:order:{order_id}") as first_time:
                if first_time:
                    Invoice.objects.create(...)
        """
        return effects.once(key, job_id=self.job_id)

    @contextmanager
    def external_call(self, name: str) -> Iterator[None]:
        """Commit a mark on the job before the block calls out of the system, e.g. a payment::

            with ctx.external_call("charge"):
                payments.charge(order.amount_cents, idempotency_key=key)

        The mark (``name``, this execution, the database's time) is committed before the block
        runs, through the worker's connection, even inside a transaction of the handler. If
        the execution is lost, the reaper reads it: no mark means the execution never reached
        the provider, and the job is retried; a mark means it may have, and the job is
        reconciled (when its type has ``reconcile``) or parked for review, whatever its
        ``on_lost``. The block's end is recorded too, for the operator (the job's page shows
        the marks).

        ``name`` must be one of the type's ``@job(external_calls=...)``, which declares that its
        calls are marked: raises ``ValueError`` otherwise, before anything is written. Raises
        ``LeaseLost`` (and the block does not run) if the job is no longer this execution's.
        """
        if name not in self._external_calls:
            declared = ", ".join(repr(n) for n in self._external_calls) or "none"
            raise ValueError(
                f"external call {name!r} is not declared by job type {self.type!r} "
                f"(its external_calls: {declared}); declare it: @job(..., external_calls=({name!r},))"
            )
        if self._lease.lost:
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        mark = self._writer.run(lambda: transitions.mark_call(self.job_id, self.execution_id, name))
        if mark is None:
            self._lease.lost = True
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        self._lease.marked_call = True
        try:
            yield
        except BaseException as exc:
            # The block's own exception is what the handler must see: a failure to record the
            # end (the database away, the lease lost) only leaves the end unrecorded.
            path = f"{type(exc).__module__}.{type(exc).__qualname__}"
            with suppress(Exception):
                self._writer.run(lambda: transitions.end_call(mark, path))
            raise
        if not self._writer.run(lambda: transitions.end_call(mark, None)):
            self._lease.lost = True
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")

    # ---- liveness, cancellation, deadline -----------------------------------------------------

    def cancel_requested(self) -> bool:
        """Whether an operator asked to cancel this job (learnt from the heartbeat)."""
        return self._lease.cancel_requested

    def raise_if_cancelled(self) -> None:
        """Raise ``LeaseLost``, ``JobCancelled`` or ``DeadlineExceeded`` when the job should stop.

        Call it between units of work; it costs no query.
        """
        if self._lease.lost:
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        if self._lease.cancel_requested:
            raise JobCancelled(f"cancellation of job {self.job_id} was requested")
        if self._lease.past_deadline():
            raise DeadlineExceeded(f"job {self.job_id} ran past its timeout of {self._lease.timeout}s")

    def heartbeat(self) -> None:
        """Prove the execution alive and extend its lease now, if a beat is due.

        The worker beats for every running job already; call this from a long loop whose
        worker may be starved. Writes at most once per ``HEARTBEAT_INTERVAL``. Raises like
        :meth:`raise_if_cancelled`.
        """
        now = time.monotonic()
        if self._lease.beat_due(now):
            beat = self._lease.beat(now)
            owned = self._writer.run(lambda: transitions.heartbeat([beat]))
            self._lease.record_beat(self.job_id in owned, owned.get(self.job_id, False), now, beat)
        self.raise_if_cancelled()

    # ---- progress and checkpoints -------------------------------------------------------------

    def progress(self, done: float, total: float | None = None) -> None:
        """Record progress, visible to operators; written at most once per ``PROGRESS_INTERVAL``
        (and always when ``done`` reaches ``total``). Raises ``InvalidProgress`` for a value
        that is not a finite number, ``LeaseLost`` if the job is no longer ours."""
        if self._lease.lost:
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        for name, value in (("done", done), ("total", total)):
            if value is None and name == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidProgress(f"progress {name} must be a finite number, not {value!r}")
        now = time.monotonic()
        finished = total is not None and done >= total
        if not finished and now - self._last_progress < jobs_settings.PROGRESS_INTERVAL:
            return
        self._last_progress = now
        encoded = json.dumps({"done": done, "total": total})
        if not self._writer.run(lambda: transitions.set_progress(self.job_id, self.execution_id, encoded)):
            self._lease.lost = True
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")

    def save_checkpoint(self, data: Any) -> None:
        """Durably store ``data``; a retry of this job starts with it in ``ctx.checkpoint``.

        The checkpoint is committed at once, on the worker's connection, even when called
        inside a transaction of the handler: save it only after the work it stands for is
        itself committed, or a retry would skip work that never happened. Raises
        ``InvalidCheckpoint`` for data that is not plain JSON or is larger than
        ``MAX_CHECKPOINT_BYTES`` (nothing is written), ``LeaseLost`` if the job is no longer ours.
        """
        problem = plain_json_problem(data, "checkpoint")
        if problem is not None:
            raise InvalidCheckpoint(f"{problem}; nothing was written")
        encoded = encode(data)
        too_large = bounded_problem(
            encoded, "checkpoint", "MAX_CHECKPOINT_BYTES", jobs_settings.MAX_CHECKPOINT_BYTES
        )
        if too_large is not None:
            raise InvalidCheckpoint(f"{too_large}; nothing was written")
        if self._lease.lost or not self._writer.run(
            lambda: transitions.set_checkpoint(self.job_id, self.execution_id, encoded)
        ):
            self._lease.lost = True
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        self.checkpoint = data
