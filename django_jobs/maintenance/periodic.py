"""The scheduler: enqueues each tick of each declared schedule once, from every worker at once.

There is no leader. Every ``runjobs`` process runs a :class:`SchedulerLoop` that sleeps until
the next tick is due and then makes one statement (``transitions.claim_tick``): the tick's row
is inserted under a unique (schedule, tick time) with ``ON CONFLICT DO NOTHING``, and the worker
whose insert went through enqueues the job in the same transaction. The database's ``now()``
decides whether a tick is due; the worker's clock only decides when to ask.

Misfires: a schedule resumes from its latest tick row. Ticks that passed while no worker ran
are coalesced into one run of the latest of them (its row counts the others in
``coalesced``); when even that one is older than the schedule's ``misfire_grace``, it is
recorded as ``missed`` and nothing is enqueued. A schedule that never ticked starts with the
first tick after the worker starts: declaring a schedule does not backfill the past.

Options: ``SCHEDULES`` (none by default), read once when the loop starts
(:func:`~django_jobs.registry.declared_schedules`); each schedule's ``misfire_grace`` and
``on_running``. ``DATABASE`` names the connection.

Defaults: after a failed pass, or a tick that could not be enqueued, the loop asks again after
:data:`OUTAGE_RETRY` (2 s); across a pause longer than :data:`HOLD_CONNECTION_FOR` (10 s) it
holds no connection.

Caveats: a tick that cannot be enqueued (say, its payload no longer validates) is logged, rolled
back and retried, and does not stop the other schedules. Ticks older than the schedule tick
retention are pruned by the reaper, except each schedule's latest. Logs under
``django_jobs.scheduler``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db import transaction

from django_jobs import logs, transitions
from django_jobs.conf import jobs_settings
from django_jobs.enqueueing import enqueue
from django_jobs.errors import DATABASE_UNAVAILABLE
from django_jobs.maintenance.service import Service
from django_jobs.models import Job
from django_jobs.registry import declared_schedules
from django_jobs.schedules import Schedule

logger = logging.getLogger("django_jobs.scheduler")

#: Seconds to wait before asking again after the database was unavailable.
OUTAGE_RETRY = 2.0
#: The scheduler keeps its connection open across a pause no longer than this (seconds).
HOLD_CONNECTION_FOR = 10.0


@dataclass(frozen=True)
class Fired:
    """What one due check did."""

    now: dt.datetime
    #: "enqueued", "skipped", "missed" or "disabled" when this worker fired the tick; "taken" when another
    #: worker had; "early" when the tick is not due by the database's clock.
    outcome: str
    job_id: int | None = None


def unique_key(schedule: Schedule) -> str:
    """The unique key of a schedule's jobs: a tick finds the previous tick's job by it."""
    return f"schedule:{schedule.name}"


def fire(
    schedule: Schedule, tick_at: dt.datetime, *, coalesced: int = 0, worker_id: str | None = None
) -> Fired:
    """Fire one tick of ``schedule`` unless it is not due or another worker fired it."""
    with transaction.atomic(using=jobs_settings.DATABASE):
        claimed = transitions.claim_tick(
            schedule.name, tick_at, grace=schedule.misfire_grace, coalesced=coalesced, worker_id=worker_id
        )
        if claimed.id is None:
            return Fired(claimed.now, "early" if tick_at > claimed.now else "taken")
        if claimed.outcome == "missed":
            logger.warning("schedule tick missed schedule=%s tick=%s", schedule.name, tick_at.isoformat())
            return Fired(claimed.now, "missed")
        if claimed.outcome == "disabled":
            return Fired(claimed.now, "disabled")
        job = enqueue(
            schedule.type,
            dict(schedule.payload),
            queue=schedule.queue,
            priority=schedule.priority,
            unique_key=unique_key(schedule) if schedule.on_running == "skip" else None,
        )
        # A job created before this tick was checked is the previous tick's job (or another
        # with the schedule's unique key), still pending or running: this tick is skipped.
        outcome = "enqueued" if job.created_at >= claimed.checked_at else "skipped"
        transitions.record_tick_job(claimed.id, job.id, outcome)
    logger.info(
        "schedule tick %s schedule=%s tick=%s job=%s coalesced=%s",
        outcome, schedule.name, tick_at.isoformat(), job.id, coalesced,
        extra=_enqueued_fields(job, worker_id),
    )  # fmt: skip
    return Fired(claimed.now, outcome, job.id)


@dataclass(frozen=True)
class Ticked:
    """What one pass of the scheduler did."""

    #: The ticks checked this pass, by outcome (as :attr:`Fired.outcome`).
    fired: dict[str, int]
    #: Ticks that could not be enqueued this pass (each is logged; retried after a pause).
    failed: int
    #: Seconds until the next tick of any schedule is due.
    next_tick_in: float


class SchedulerLoop(Service[Ticked]):
    """Fires the ticks of the declared schedules until ``stop`` is set. Idle between ticks: one
    statement at start, then one per tick of each schedule."""

    logger: ClassVar[logging.Logger] = logger
    outage_message: ClassVar[str] = "scheduler pass failed, retrying: %s"
    failure_message: ClassVar[str] = "scheduler pass failed, retrying"
    # A long sleep holds no connection slot: a nightly schedule costs each worker one
    # connection a night, not one for ever.
    hold_connection_for: ClassVar[float | None] = HOLD_CONNECTION_FOR

    def __init__(self, stop: threading.Event, worker_id: str | None = None) -> None:
        super().__init__("django_jobs-scheduler", stop)
        self._worker_id = worker_id
        self.schedules = declared_schedules()
        #: Each schedule's latest tick known to be handled.
        self._after: dict[str, dt.datetime] = {}
        self._now = dt.datetime.now(dt.UTC)  # replaced by the database's before any use
        self._now_read_at = time.monotonic()
        self._pause = 0.0  # the first pass comes at once

    def run_once(self) -> Ticked:
        """Fire every due tick (resuming from the latest tick rows first, once); say what was
        done and when the next tick is due. Raises what the database raised."""
        if not self._after:
            self._resume()
        fired, failed = self._fire_due()
        return Ticked(fired, failed, self._seconds_to_next_tick())

    def next_wait(self) -> float:
        return self._pause

    def _passed(self, result: Ticked) -> None:
        super()._passed(result)
        self._pause = max(result.next_tick_in, OUTAGE_RETRY) if result.failed else result.next_tick_in

    def _failed(self) -> None:
        self._pause = OUTAGE_RETRY

    def _resume(self) -> None:
        now, last = transitions.last_ticks([schedule.name for schedule in self.schedules])
        self._set_now(now)
        # A schedule that never ticked starts now: declaring it does not backfill the past.
        self._after = {schedule.name: last.get(schedule.name) or now for schedule in self.schedules}

    def _set_now(self, now: dt.datetime) -> None:
        self._now, self._now_read_at = now, time.monotonic()

    def _estimated_now(self) -> dt.datetime:
        """The database's clock, as last read plus the time elapsed here since."""
        return self._now + dt.timedelta(seconds=time.monotonic() - self._now_read_at)

    def _fire_due(self) -> tuple[dict[str, int], int]:
        """Fire every due tick; count them by outcome, and those that failed (they are retried
        after a pause)."""
        outcomes: dict[str, int] = {}
        failed = 0
        for schedule in self.schedules:
            tick, count = schedule.latest_due(self._after[schedule.name], self._estimated_now())
            if tick is None:
                continue
            try:
                fired = fire(schedule, tick, coalesced=count - 1, worker_id=self._worker_id)
            except DATABASE_UNAVAILABLE:
                raise
            except Exception:
                # A tick that cannot be enqueued (say, its payload no longer validates) must not
                # stop the other schedules; its row was rolled back, so it is retried next pass.
                logger.exception("schedule tick failed schedule=%s tick=%s", schedule.name, tick.isoformat())
                failed += 1
                continue
            outcomes[fired.outcome] = outcomes.get(fired.outcome, 0) + 1
            self._set_now(fired.now)
            if fired.outcome != "early":
                self._after[schedule.name] = tick
        return outcomes, failed

    def _seconds_to_next_tick(self) -> float:
        if not self.schedules:
            return 3600.0
        now = self._estimated_now()
        soonest = min(schedule.next_after(self._after[schedule.name]) for schedule in self.schedules)
        # A little after the tick, so that the database's clock has passed it too.
        return max((soonest - now).total_seconds(), 0.0) + 0.005


def run_now(schedule: Schedule, *, actor: str, reason: str) -> int:
    """Enqueue the schedule's job at once, out of turn, and record who and why; returns the
    job's id. The next tick is not disturbed: this job has no tick and no unique key, so it
    neither takes a tick's place nor makes the next tick skip."""
    with transaction.atomic(using=jobs_settings.DATABASE):
        job = enqueue(schedule.type, dict(schedule.payload), queue=schedule.queue, priority=schedule.priority)
        transitions.record_run_now(schedule.name, actor=actor, reason=reason, job_id=job.id)
    logger.info(
        "schedule run now schedule=%s job=%s actor=%s",
        schedule.name,
        job.id,
        actor,
        extra=_enqueued_fields(job, None),
    )
    return job.id


def _enqueued_fields(job: Job, worker_id: str | None) -> dict[str, Any]:
    """The log fields of a schedule's job: it has no execution of its own yet (a tick skipped
    for a job still running names that job's execution)."""
    return logs.job_fields(job.id, job.type, job.queue, None, job.execution_id, worker_id)
