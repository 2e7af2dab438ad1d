"""What operators do about a restored database, checked first: declare a restore the workers
cannot see, release a hold (settling the jobs it kept), and read where things stand
(``manage.py jobsrestore``).

Each action is recorded with who and why (``RestoreHold``); nothing is half done: a refused
action writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from django_jobs.conf import jobs_settings
from django_jobs.console.reasons import check_actor_and_reason
from django_jobs.models import DatabaseIdentity, Job, RestoreHold
from django_jobs.models.restore import open_hold
from django_jobs.registry import registry
from django_jobs.restoring import Identity
from django_jobs.states import JobStatus
from django_jobs.transitions import restore
from django_jobs.transitions.operator import ActionRefused


@dataclass(frozen=True)
class RestoreStatus:
    hold: RestoreHold | None
    recorded: DatabaseIdentity | None
    live: Identity
    #: The job types of this code base whose jobs wait while a hold is open.
    outside: list[str]
    #: Of those, how many jobs are pending and running now: (type, status) → count.
    waiting: dict[tuple[str, str], int]


@dataclass(frozen=True)
class Released:
    hold_id: int
    settled: restore.Settled


def outside_types() -> list[str]:
    """The registered job types whose effects may be outside the database."""
    return sorted(job_type.name for job_type in registry.all() if job_type.acts_outside)


def status() -> RestoreStatus:
    alias = jobs_settings.DATABASE
    outside = outside_types()
    counts = (
        Job.objects.using(alias)
        .filter(type__in=outside, status__in=(JobStatus.PENDING, JobStatus.RUNNING))
        .values_list("type", "status")
        .annotate(n=Count("id"))
    )
    return RestoreStatus(
        hold=open_hold(alias),
        recorded=DatabaseIdentity.objects.using(alias).first(),
        live=restore.live_identity(),
        outside=outside,
        waiting={(type_, status_): n for type_, status_, n in counts},
    )


def declare(*, actor: str, reason: str) -> int:
    """Open a restore hold for a restore the workers cannot see (a base backup started on the
    same timeline with no worker running, a restore of the business tables alone). Returns its
    id. Raises ``ValueError`` for a missing actor or reason, ``ActionRefused`` if one is open."""
    check_actor_and_reason(actor, reason)
    return restore.declare(actor=actor, reason=reason)


def release(*, actor: str, reason: str, hold_id: int | None = None) -> Released:
    """Release the open restore hold (``hold_id``, if given, must be it) and settle the jobs it
    kept: of the external types, those that can ``reconcile`` ask the provider before they run
    again, the others are parked in ``needs_review``. Raises ``ValueError`` for a missing actor
    or reason, ``ActionRefused`` when no hold is open or ``hold_id`` is not the open one."""
    check_actor_and_reason(actor, reason)
    hold = open_hold(jobs_settings.DATABASE)
    if hold is None:
        raise ActionRefused("no restore hold is open")
    if hold_id is not None and hold_id != hold.id:
        raise ActionRefused(f"restore hold {hold_id} is not the open one (hold {hold.id} is)")
    outside = [job_type for job_type in registry.all() if job_type.acts_outside]
    settled = restore.release(
        hold.id,
        actor=actor,
        reason=reason,
        reconcilable=[t.name for t in outside if t.reconcile is not None],
        hookless=[t.name for t in outside if t.reconcile is None],
    )
    return Released(hold.id, settled)
