"""``JobContext``: what a handler knows about the execution it runs in, and what it may do.

It reads its ``Lease`` (``runtime/lease.py``), shared with the worker's heartbeat thread, to
tell the handler without a query whether the execution still owns its job, whether
cancellation was requested and how long it has left; what it writes (heartbeat, progress,
checkpoints, external-call marks) goes through a ``SideWriter`` (``runtime/side_writes.py``).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from django_jobs import effects, transitions
from django_jobs.conf import jobs_settings
from django_jobs.errors import DeadlineExceeded, JobCancelled, class_path
from django_jobs.jsonvalues import check_progress, checkpoint_json, progress_json
from django_jobs.reads import workflows as workflow_reads
from django_jobs.runtime.durable import DurableSteps, atomic_depth
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.side_writes import InlineWriter, SideWriter


class LeaseLost(Exception):
    """This execution no longer owns its job (it was recovered and handed to another worker).

    Raised by the context; the handler should let it propagate. Nothing this execution reports
    is written: the job's state belongs to the new owner.
    """

    # Defined here, with the context that raises it, and nowhere else: users catch it. What is
    # stored of it is its public name (``django_jobs.LeaseLost``, ``errors.class_path``): a
    # task's result records it as the exception that ended a lost execution.


class JobContext(DurableSteps):
    """Passed to every handler as its first argument.

    ``attempt`` counts executions that started, this one included (1 on the first run).
    ``deadline`` is the time (by the database's clock) after which the execution is treated as
    timed out, or ``None``; give the handler's blocking calls timeouts derived from
    :meth:`time_left`.

    ``heartbeat()``, ``progress()`` and ``save_checkpoint()`` write through the worker's own
    connection, not the handler's: called inside the handler's ``transaction.atomic()``, they
    neither wait for it nor lock the job row until it commits (which would stall the
    heartbeat of every other job of the worker), and they are durable at once.

    A durable handler's ``step()``, ``external_step()``, ``sleep()`` and ``wait_for()`` come
    from ``runtime/durable.py`` (docs/durable-jobs.md).
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
        self._atomic_at_start = atomic_depth()

    def _lost(self) -> LeaseLost:
        self._lease.lost = True
        return LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")

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

    def parent_result(self) -> Any:
        """What the job this workflow step waited for returned (None if it returned nothing).

        For a step of a chain after a single step. Raises ``ValueError`` for a job that is not
        such a step: one that waits for nothing, or for several jobs (read those with
        :meth:`upstream`).
        """
        waited = workflow_reads.waits(self.job_id)
        if waited is None:
            raise ValueError(
                f"job {self.job_id} waits for no other job: it is not a later step of a workflow"
            )
        if waited.leaves or waited.size != 1:
            raise ValueError(
                f"job {self.job_id} waited for {waited.size} jobs, not one: read them with ctx.upstream()"
            )
        for ended in workflow_reads.results(waited):
            return ended.result
        # Only in a workflow cut apart by a release that pruned workflows job by job.
        raise LookupError(f"job {self.job_id}: the job it waited for no longer exists (retention removed it)")

    def upstream(self) -> workflow_reads.Upstream:
        """The jobs this workflow step (or callback) waited for: ``.summary()`` counts them by
        status, ``.results()`` yields each one's outcome and result. Raises ``ValueError`` for a
        job that waits for nothing."""
        waited = workflow_reads.waits(self.job_id)
        if waited is None:
            raise ValueError(
                f"job {self.job_id} waits for no other job: it is not a later step of a workflow"
            )
        return workflow_reads.Upstream(waited)

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
            path = class_path(type(exc))
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
        check_progress(done, total)
        now = time.monotonic()
        finished = total is not None and done >= total
        if not finished and now - self._last_progress < jobs_settings.PROGRESS_INTERVAL:
            return
        self._last_progress = now
        encoded = progress_json(done, total)
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
        encoded = checkpoint_json(data)
        if self._lease.lost or not self._writer.run(
            lambda: transitions.set_checkpoint(self.job_id, self.execution_id, encoded)
        ):
            self._lease.lost = True
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        self.checkpoint = data
