"""The heartbeat: extends the leases of this process's executions, one statement per beat, and
runs the executions' side writes on its own connection.

A lease is extended only when it is due (``HEARTBEAT_INTERVAL`` since the last sign of life,
or half the lease if that is shorter), only for job types that beat, and never past the
execution's deadline: a job that runs forever loses its lease and is recovered, whatever its
heartbeat. Executions whose lease is not extended are still polled at the same pace, to learn
of cancel requests. A beat that finds a row no longer owned marks the lease lost, which the
handler learns from its context. A beat also records the start of prefetched executions.

Side writes (``ctx.heartbeat()``, ``ctx.progress()``, ``ctx.save_checkpoint()``) are queued to
this thread, so they never run inside a transaction the handler opened: such a transaction
would hold the job row's lock until it commits, and the beat for every other job would wait.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from django.db import connections

from django_jobs import logs, transitions
from django_jobs.conf import jobs_settings
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.runtime import connectivity
from django_jobs.runtime.lease import Lease

logger = logging.getLogger("django_jobs.heartbeat")

T = TypeVar("T")


class Heartbeat:
    """A daemon thread beating for the leases ``held()`` returns; also the side writer."""

    def __init__(self, held: Callable[[], list[Lease]], report: Callable[[], None] | None = None) -> None:
        self._held = held
        self._report = report
        self._last_report = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._writes: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="django_jobs-heartbeat", daemon=True)
        self._warned_deadline: set[int] = set()
        #: Monotonic time of the last turn of the loop: a stalled heartbeat is visible.
        self.last_turn = time.monotonic()
        #: Told whether each report reached the database (the worker's liveness listens).
        self.on_database: Callable[[bool], None] | None = None
        # Since when (monotonic) the heartbeat has been asking the database without an answer:
        # a statement in flight, or failed and not yet answered on a retry. None when answered.
        self._unanswered_since: float | None = None
        self._answered = 0  # statements answered, counted by this thread only

    def turned_at(self) -> float | None:
        """The last turn of the loop (monotonic), or None if its thread died: the liveness
        probe's view. A heartbeat not started yet, or stopped on purpose, is not dead."""
        if self._stop.is_set():
            return time.monotonic()
        if self._thread.ident is not None and not self._thread.is_alive():
            return None
        return self.last_turn

    def unanswered_for(self, now: float) -> float:
        """Seconds the heartbeat has been trying to reach the database without an answer (0
        while its last statement was answered). Read from other threads: one attribute load."""
        since = self._unanswered_since
        return 0.0 if since is None else max(0.0, now - since)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def run(self, write: Callable[[], T]) -> T:
        """Run ``write`` on the heartbeat's thread and connection; return its result or raise.

        Falls back to the calling thread when the heartbeat is not running (before the start,
        after the stop).
        """
        if not self._thread.is_alive() or self._stop.is_set():
            return write()
        future: Future[T] = Future()
        self._writes.put((write, future))
        self._wake.set()
        while True:
            try:
                return future.result(timeout=1.0)
            except TimeoutError:
                # Queued just as the thread ended: nobody will take it, so write it here.
                if not self._thread.is_alive() and future.set_running_or_notify_cancel():
                    return write()

    def beat_once(self) -> int:
        """Write for every execution that is due now; return how many still own their job."""
        now = time.monotonic()
        leases = self._held()
        for lease in leases:
            if lease.beats and lease.past_deadline(now) and id(lease) not in self._warned_deadline:
                self._warned_deadline.add(id(lease))
                logger.warning(
                    "job past its deadline id=%s execution=%s: its lease is no longer extended",
                    lease.job_id, lease.execution_id, extra=logs.lease_fields(lease),
                )  # fmt: skip
        due = [(lease, lease.beat(now)) for lease in leases if lease.beat_due(now)]
        if not due:
            return 0
        owned = transitions.heartbeat(beat for _, beat in due)
        self._answered += 1
        for lease, beat in due:
            lease.record_beat(lease.job_id in owned, owned.get(lease.job_id, False), now, beat)
            if lease.job_id not in owned:
                logger.warning(
                    "lease lost id=%s execution=%s",
                    lease.job_id,
                    lease.execution_id,
                    extra=logs.lease_fields(lease),
                )
        return len(owned)

    def _tick(self) -> float:
        # Wake often enough to catch the shortest due lease, without spinning.
        shortest = min([jobs_settings.HEARTBEAT_INTERVAL, *(lease.duration / 2 for lease in self._held())])
        return min(1.0, max(0.01, shortest / 4))

    def _side_writes(self) -> None:
        while True:
            try:
                write, future = self._writes.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(write())
                self._answered += 1
            except BaseException as exc:  # handed to the handler that asked
                if isinstance(exc, DATABASE_UNAVAILABLE):
                    connections[jobs_settings.DATABASE].close()
                future.set_exception(exc)

    def _turn(self) -> None:
        """Run the side writes queued, beat for what is due and report the worker when due;
        keep the account of when the database last answered (``unanswered_for``)."""
        answered_before = self._answered
        retrying = self._unanswered_since is not None  # the last turn's statement failed
        if not retrying:
            self._unanswered_since = time.monotonic()  # until this turn's statements return
        self._side_writes()  # one stuck in a network cut holds the beats up as well
        self.beat_once()
        if self._report and time.monotonic() - self._last_report >= jobs_settings.HEARTBEAT_INTERVAL:
            self._report()
            self._answered += 1
            self._last_report = time.monotonic()
            if self.on_database is not None:
                self.on_database(True)
        if self._answered > answered_before or not retrying:
            # Answered; or nothing was asked this turn, and nothing had failed before it.
            self._unanswered_since = None

    def _run(self) -> None:
        connectivity.run_worker_statements()
        try:
            while not self._stop.is_set():
                self._wake.wait(self._tick())
                self._wake.clear()
                self.last_turn = time.monotonic()
                try:
                    self._turn()
                except DATABASE_UNAVAILABLE as exc:
                    if self.on_database is not None:
                        self.on_database(False)
                    # Leases keep their last known state: the database decides ownership when
                    # it answers again, and a beat that comes too late is reported as lost.
                    logger.warning("heartbeat failed, retrying: %s", type(exc).__name__)
                    connections[jobs_settings.DATABASE].close()
                    self._last_report = 0.0  # the next turn asks, even with no lease due
                except Exception:
                    # A dead heartbeat thread would let every lease of this process expire.
                    logger.exception("heartbeat error, beating on")
                    self._unanswered_since = None  # a bug of ours, not a database that is away
        finally:
            self._side_writes()  # nobody may wait forever on a write queued at the stop
            connections.close_all()
