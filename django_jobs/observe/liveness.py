"""Whether a worker is alive *and useful* (liveness), and whether it can take work (readiness).

A worker process that is running is not necessarily working: every executor thread may be
stuck in a call without a timeout, the heartbeat thread may have died (every lease of the
process then runs out), the claim loop may hang, or the database may have been unreachable
for minutes. A process manager can only replace such a worker if something says so: the
worker's threads report to one :class:`Liveness`, and its verdicts feed the health file
(``runjobs --health-file``) and the probe endpoints (``/healthz``, ``/readyz`` on
``runjobs --metrics-port``).

*Live* is false when any of these holds (limits in settings, defaults derived from the
intervals they watch):

- as many executions are stuck past their deadlines as the worker has slots: a thread still
  running a job more than ``STUCK_GRACE`` past its deadline (the pool gave its slot a new
  thread), or a child process not killed ``LIVENESS_STUCK_LIMIT`` after it;
- the claim loop has not turned for ``LIVENESS_STALL_LIMIT`` seconds;
- the heartbeat thread is dead, or has not turned for ``LIVENESS_STALL_LIMIT`` seconds;
- the database has been unreachable for ``LIVENESS_OUTAGE_LIMIT`` seconds.

*Ready* is false before start-up is done (the threads started and the database answered
once), while the database is unreachable, and from the start of a shutdown. A worker held by a
restore hold (it starts no job of an external type, see docs/operations/restore.md) stays ready: it
still runs the other jobs, and a rollout, of a reconcile hook say, must not wait for the hold.
Its readiness says so in a note instead.

Reporting costs the reporting thread an attribute write; the verdict is computed only when
asked (a probe, or the health file's turn, at most once a second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django_jobs.conf import jobs_settings

#: The note of a ready worker held by a restore hold.
HELD = "held: a restore hold is open, jobs of external types wait (manage.py jobsrestore)"


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: ok, or the reasons it is not."""

    ok: bool
    reasons: tuple[str, ...] = ()
    #: What an operator should know that does not make the answer no.
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        lines = ("ok",) if self.ok else self.reasons
        return "".join(f"{line}\n" for line in (*lines, *self.notes))


@dataclass(frozen=True)
class Limits:
    """Seconds after which each condition makes the worker not live."""

    stall: float
    outage: float
    stuck: float

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            stall=jobs_settings.LIVENESS_STALL_LIMIT,
            outage=jobs_settings.LIVENESS_OUTAGE_LIMIT,
            stuck=jobs_settings.LIVENESS_STUCK_LIMIT,
        )


class Liveness:
    """The health of one worker, reported by its threads, judged when asked.

    ``stuck(past)`` returns how many executions are stuck (see the module's doc), ``slots``
    how many the worker has; ``heartbeat()`` returns the monotonic time of the heartbeat's
    last turn, or None when its thread is dead; ``restore_held()`` whether a restore hold
    keeps jobs of this worker's types waiting. Any of them may be left out (not watched).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        slots: int = 1,
        stuck: Callable[[float], int] | None = None,
        heartbeat: Callable[[], float | None] | None = None,
        restore_held: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits or Limits.from_settings()
        self.slots = slots
        self._stuck = stuck
        self._heartbeat = heartbeat
        self._restore_held = restore_held
        self._clock = clock
        self._loop_at: float | None = None  # the claim loop's last turn; None before the first
        self._lost_at: float | None = None  # since when the database is unreachable
        self._reached = False  # the database answered once
        self._started = False
        self._stopping = False

    # ---- what the threads report ------------------------------------------------------------

    def started(self) -> None:
        """The worker's threads are up."""
        self._started = True

    def stopping(self) -> None:
        """A shutdown began: no new work for this worker."""
        self._stopping = True

    def loop_turned(self) -> None:
        self._loop_at = self._clock()

    def database_answered(self) -> None:
        self._reached = True
        self._lost_at = None

    def database_lost(self) -> None:
        if self._lost_at is None:
            self._lost_at = self._clock()

    # ---- verdicts ---------------------------------------------------------------------------

    def live(self) -> Verdict:
        """Alive and useful; else the reasons, for a process manager to replace the worker."""
        now = self._clock()
        reasons: list[str] = []
        limits = self.limits
        if self._stuck is not None:
            stuck = self._stuck(limits.stuck)
            if stuck >= self.slots:
                reasons.append(f"{stuck} execution(s) stuck past their deadline, with {self.slots} slot(s)")
        # A shutdown waits for running jobs outside the claim loop, for as long as its grace.
        if not self._stopping and self._loop_at is not None and now - self._loop_at > limits.stall:
            reasons.append(f"the claim loop has not turned for {now - self._loop_at:.0f}s")
        if self._heartbeat is not None:
            beat = self._heartbeat()
            if beat is None:
                reasons.append("the heartbeat thread is dead: leases are no longer extended")
            elif now - beat > limits.stall:
                reasons.append(f"the heartbeat has not turned for {now - beat:.0f}s")
        if self._lost_at is not None and now - self._lost_at > limits.outage:
            reasons.append(f"the database has been unreachable for {now - self._lost_at:.0f}s")
        return Verdict(not reasons, tuple(reasons))

    def ready(self) -> Verdict:
        """Able to take work now."""
        reasons: list[str] = []
        if not (self._started and self._reached):
            reasons.append("starting")
        if self._stopping:
            reasons.append("shutting down")
        if self._lost_at is not None:
            reasons.append(f"the database is unreachable (for {self._clock() - self._lost_at:.0f}s)")
        notes = (HELD,) if self.restore_held() else ()
        return Verdict(not reasons, tuple(reasons), notes)

    def restore_held(self) -> bool:
        """Whether a restore hold keeps jobs of this worker's external types waiting."""
        return self._restore_held is not None and self._restore_held()
