"""What operators do about a restored database, checked first: declare a restore the workers
cannot see, release a hold (settling the jobs it kept), and read where things stand
(``manage.py jobsrestore``).

Each action is recorded with who and why (``RestoreHold``); nothing is half done: a refused
action writes nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from django.db.models import Count

from django_jobs.conf import jobs_settings
from django_jobs.console.reasons import check_actor_and_reason
from django_jobs.models import DatabaseIdentity, Job, LiveWorker, RestoreHold
from django_jobs.models.restore import open_hold
from django_jobs.reads.clock import database_now
from django_jobs.registry import registry
from django_jobs.restoring import Identity
from django_jobs.states import JobStatus
from django_jobs.transitions import restore, restore_release
from django_jobs.transitions.operator import ActionRefused

#: The statuses of the jobs a hold keeps: not started (a workflow's step waiting, or pending), or
#: running (its execution goes on; if it is lost, it is reconciled or parked). A parked job
#: (needs_review) waits for a person anyway; an ended one stays as it is.
HELD_STATUSES = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


@dataclass(frozen=True)
class RestoreStatus:
    hold: RestoreHold | None
    recorded: DatabaseIdentity | None
    live: Identity
    #: The job types of this code base whose jobs wait while a hold is open.
    outside: list[str]
    #: Of those, how many jobs are not ended and not parked now (waiting, pending, running):
    #: (type, status) → count.
    waiting: dict[tuple[str, str], int]
    #: Workers that reported within the silence threshold.
    live_workers: int

    #: Of those, the types that can ask their provider (``reconcile``).
    reconcilable: list[str]

    @property
    def running_outside(self) -> int:
        return sum(n for (_, status_), n in self.waiting.items() if status_ == JobStatus.RUNNING)


@dataclass(frozen=True)
class Released:
    hold_id: int
    settled: restore_release.Settled


def outside_types() -> list[str]:
    """The registered job types whose effects may be outside the database."""
    return sorted(job_type.name for job_type in registry.all() if job_type.acts_outside)


def reconcilable_types() -> list[str]:
    """Of ``outside_types()``, those that can ask their provider (``reconcile``)."""
    return sorted(t.name for t in registry.all() if t.acts_outside and t.reconcile is not None)


def status() -> RestoreStatus:
    alias = jobs_settings.DATABASE
    outside = outside_types()
    now = database_now()
    counts = (
        Job.objects.using(alias)
        .filter(type__in=outside, status__in=HELD_STATUSES)
        .values_list("type", "status")
        .annotate(n=Count("id"))
    )
    return RestoreStatus(
        hold=open_hold(alias),
        recorded=DatabaseIdentity.objects.using(alias).first(),
        live=restore.live_identity(),
        outside=outside,
        reconcilable=reconcilable_types(),
        waiting={(type_, status_): n for type_, status_, n in counts},
        live_workers=sum(w.is_alive(now) for w in LiveWorker.objects.using(alias)),
    )


def declare(*, actor: str, reason: str) -> int:
    """Open a restore hold for a restore the workers cannot see (a base backup started on the
    same timeline with no worker running, a restore of the business tables alone). Returns its
    id. Raises ``ValueError`` for a missing actor or reason, ``ActionRefused`` if one is open."""
    check_actor_and_reason(actor, reason)
    return restore.declare(actor=actor, reason=reason)


def release(
    *,
    actor: str,
    reason: str,
    hold_id: int | None = None,
    done: Collection[int] = (),
    not_done: Collection[int] = (),
) -> Released:
    """Release the open restore hold (``hold_id``, if given, must be it) and settle the jobs it
    kept: those the operator checked with the provider are completed (``done``: the effect
    happened) or run again as they are (``not_done``); of the others, those whose type can
    ``reconcile`` ask the provider before they run again, the rest are parked in
    ``needs_review``; a workflow's step still waiting keeps waiting, and does either once it is
    due. Raises ``ValueError`` for a missing actor or reason or a job answered
    both ways, ``ActionRefused`` when no hold is open, ``hold_id`` is not the open one, or an
    answered job is not one the hold keeps from starting; a refused release writes nothing."""
    check_actor_and_reason(actor, reason)
    both = sorted(set(done) & set(not_done))
    if both:
        raise ValueError(f"job {both[0]} is answered both done and not done")
    hold = open_hold(jobs_settings.DATABASE)
    if hold is None:
        raise ActionRefused("no restore hold is open")
    if hold_id is not None and hold_id != hold.id:
        raise ActionRefused(f"restore hold {hold_id} is not the open one (hold {hold.id} is)")
    reconcilable = reconcilable_types()
    settled = restore_release.release(
        hold.id,
        actor=actor,
        reason=reason,
        reconcilable=reconcilable,
        hookless=[name for name in outside_types() if name not in reconcilable],
        done=done,
        not_done=not_done,
    )
    return Released(hold.id, settled)
