"""Pausing and resuming queues, from Python (the console and ``manage.py jobsqueue`` call this).

A paused queue still accepts jobs; workers claim none of them until it is resumed. Jobs of the
queue that are running when it is paused finish normally. The pause is kept in the database
(``Queue``), so it holds across worker restarts and deploys, and every pause and resume is a
``QueueEvent`` with who and why.

Every worker knows within a second: the claim statement itself skips paused queues, and a pause
or a resume notifies the listening workers at commit (a resume wakes them, so they claim at
once; a pause makes them give back the jobs of that queue they prefetched but did not start).
Workers that poll (``NOTIFY`` off) see both at their next claim.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.console.reasons import check_actor_and_reason
from django_jobs.models import Job, Queue
from django_jobs.names import QUEUE_RE
from django_jobs.registry import registry


class InvalidQueue(ValueError):
    """The name is not a queue's name, or names a queue nobody uses."""


@dataclass(frozen=True, slots=True)
class PausedQueue:
    name: str
    paused_at: dt.datetime  # by the database's clock
    paused_by: str
    reason: str


def pause_queue(name: str, *, actor: str, reason: str) -> None:
    """Pause ``name``: its pending jobs wait, new ones are accepted, running ones finish.

    The queue must be known: one a registered job type names, one that holds jobs, or one
    paused before. Raises ``InvalidQueue`` for a bad or unknown name, ``ValueError`` for a bad
    actor or reason, and ``ActionRefused`` if the queue is paused already; nothing is written
    then.
    """
    _check(name, actor, reason)
    if not _known(name):
        raise InvalidQueue(
            f"no job type names the queue {name!r} and no job was ever enqueued in it: "
            "is the name spelled right?"
        )
    transitions.pause_queue(name, actor=actor, reason=reason)


def resume_queue(name: str, *, actor: str, reason: str) -> None:
    """Resume a paused queue: listening workers claim its jobs at once.

    Raises ``InvalidQueue`` for a bad name, ``ValueError`` for a bad actor or reason, and
    ``ActionRefused`` if the queue is not paused; nothing is written then.
    """
    _check(name, actor, reason)
    transitions.resume_queue(name, actor=actor, reason=reason)


def paused_queues() -> list[PausedQueue]:
    """The queues paused now, by name."""
    rows = Queue.objects.using(jobs_settings.DATABASE).filter(paused_at__isnull=False).order_by("name")
    return [PausedQueue(q.name, q.paused_at, q.paused_by or "", q.reason or "") for q in rows if q.paused_at]


def is_paused(name: str) -> bool:
    return Queue.objects.using(jobs_settings.DATABASE).filter(name=name, paused_at__isnull=False).exists()


def known_queues() -> list[str]:
    """Queues that can be paused: named by a registered job type, holding jobs, or paused before.

    Each source is an index probe per queue (a loose index scan of the job table's queue index).
    """
    names = {job_type.default_queue for job_type in registry.all()}
    names.update(Job.objects.using(jobs_settings.DATABASE).distinct_values("queue"))
    names.update(Queue.objects.using(jobs_settings.DATABASE).values_list("name", flat=True))
    return sorted(names)


def _known(name: str) -> bool:
    alias = jobs_settings.DATABASE
    return (
        any(job_type.default_queue == name for job_type in registry.all())
        or Job.objects.using(alias).filter(queue=name).exists()
        or Queue.objects.using(alias).filter(name=name).exists()
    )


def _check(name: object, actor: object, reason: object) -> None:
    # fullmatch: the pattern's "$" would let a trailing newline through.
    if not isinstance(name, str) or not QUEUE_RE.fullmatch(name):
        raise InvalidQueue(
            f"{name!r} is not a valid queue name (letters, digits and _ . : -, up to 100 characters)"
        )
    check_actor_and_reason(actor, reason)
