"""A job type and its policy: what ``@job`` declares of the work besides its handler.

``JobType`` holds the policy a type was registered with (queue, priority, attempts and backoff,
timeout, payload versions and their upcasters, lease and heartbeat, what happens to a lost
execution and its external calls, concurrency and rate limits, schedule, sensitive and
searchable keys) and the defaults that stand for what it leaves unsaid, read from
``DJANGO_JOBS`` when they are asked for. Part of the registry: it imports only pure rules,
``conf`` and ``handlers``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_jobs.backoff import Backoff
from django_jobs.conf import jobs_settings
from django_jobs.handlers import Handler
from django_jobs.limits import RateLimit
from django_jobs.schedules import Schedule

if TYPE_CHECKING:
    from django_jobs.runtime.context import JobContext

ON_LOST_CHOICES = ("retry", "reconcile", "needs_review")


class Reconciliation(enum.Enum):
    """A ``reconcile`` function's answer: did the previous attempt's side effect happen?"""

    DONE = "done"  # it happened: the job completes without running again
    NOT_DONE = "not_done"  # it did not: run the handler again
    UNKNOWN = "unknown"  # cannot tell: a human must look (needs_review)


Reconciler = Callable[["JobContext", dict[str, Any]], Reconciliation]
#: A type-level concurrency key: payload → key, or None for a job that needs none.
KeyFunction = Callable[[dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class JobType:
    """A registered job type: its handler and its policy."""

    name: str
    handler: Handler
    queue: str | None = None  # None: DJANGO_JOBS["DEFAULT_QUEUE"] when the job is enqueued
    priority: int = 0
    max_attempts: int | None = None  # None: DJANGO_JOBS["DEFAULT_MAX_ATTEMPTS"]
    backoff: Backoff | None = None  # None: the BACKOFF_* settings
    #: Execution deadline in seconds; None means no deadline.
    timeout: float | None = None
    #: Current payload version; older payloads are upcast before the handler sees them.
    version: int = 1
    upcasters: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    #: How long an execution owns the job without a sign of life; None: LEASE_TIMEOUT.
    lease_timeout: float | None = None
    #: Whether the worker extends the lease while the job runs. A short job may run on its
    #: lease alone (False): then the lease must cover its whole run.
    heartbeat: bool = True
    #: What happens to a job whose last execution may or may not have done its side effect
    #: (lost, timed out, interrupted): "retry" it blindly (idempotent jobs), "reconcile" it
    #: first (ask ``reconcile`` what happened), or park it in "needs_review" for a human.
    on_lost: str = "retry"
    reconcile: Reconciler | None = None
    #: Seconds within which a job of this type should start; older pending jobs are shown as
    #: SLA breaches on the dashboard.
    sla: float | None = None
    #: Payload keys (exact names, at any depth) whose values the console masks for people
    #: without the ``view_sensitive_payload`` permission, besides SENSITIVE_PAYLOAD_KEYS.
    sensitive: tuple[str, ...] = ()
    #: Top-level payload keys the console's search finds jobs of this type by (``key=value``),
    #: each through an index of its own (``reads.search_fields``); never a sensitive key.
    search: tuple[str, ...] = ()
    #: The concurrency key of a job enqueued without one, computed from its payload.
    concurrency_key: KeyFunction | None = None
    #: At most this many jobs of this type with the same concurrency key run at once.
    concurrency_limit: int = 1
    #: At most so many starts of this type per window, across all workers; None: no limit.
    rate_limit: RateLimit | None = None
    #: The names of the calls out of the system this type makes, each one inside
    #: ``with ctx.external_call(name):``. Declaring them says that every call whose repetition
    #: would matter is marked: an execution lost before any mark never reached the provider and
    #: is retried; one lost after a mark is reconciled or parked (see ``on_lost_in_call``).
    external_calls: tuple[str, ...] = ()
    #: Whether its effects may be outside the database (a charge, a mail, a webhook): True, or
    #: False when they all stay in it; None when the type says nothing, and is then taken as
    #: acting outside (see ``acts_outside``).
    external: bool | None = None
    #: Registered by the Tasks backend for a Django ``@task``, which has no way to say where its
    #: effects are: it is held after a restore, and the system check does not ask it to say.
    task: bool = False
    #: When the scheduler enqueues this type on its own (``@job(schedule=...)``), or None.
    schedule: Schedule | None = None
    #: Called with the job's id and the status written once the outcome of an execution of
    #: this type has been written and committed (a task's ``task_finished`` is sent so).
    on_finished: Callable[[int, str], None] | None = None

    @property
    def on_lost_in_call(self) -> str | None:
        """Where a lost execution that marked an external call sends the job: "reconcile" when
        the type can ask the provider, "needs_review" otherwise, whatever its ``on_lost``;
        None for a type that declares no external calls."""
        if not self.external_calls:
            return None
        return "reconcile" if self.reconcile is not None else "needs_review"

    @property
    def acts_outside(self) -> bool:
        """Whether a job of this type may have effects a restored database does not remember,
        so that it waits while a restore hold is open. Only a type that says its effects stay in
        the database (``external=False``) is inside: nothing can tell from outside a handler
        that it calls no provider (using ``ctx.effect`` does not say it calls none)."""
        return self.external is not False

    @property
    def says_where_effects_are(self) -> bool:
        """Whether the type says where its effects are: ``external=True`` or ``False``, or
        known outside by its external calls, its ``reconcile`` or ``on_lost="needs_review"``.
        One that says nothing is held after a restore all the same; the system check names it
        (``django_jobs.W008``), unless it is a Django task's (``task``)."""
        return (
            self.external is not None
            or bool(self.external_calls)
            or self.reconcile is not None
            or self.on_lost == "needs_review"
        )

    @property
    def default_queue(self) -> str:
        return self.queue or jobs_settings.DEFAULT_QUEUE

    @property
    def default_max_attempts(self) -> int:
        return self.max_attempts or jobs_settings.DEFAULT_MAX_ATTEMPTS

    @property
    def lease(self) -> float:
        return self.lease_timeout or jobs_settings.LEASE_TIMEOUT

    @property
    def oldest_readable_version(self) -> int:
        """The oldest payload version the upcasters lead from to ``version`` without a gap."""
        oldest = self.version
        while oldest > 1 and (oldest - 1) in self.upcasters:
            oldest -= 1
        return oldest

    @property
    def retry_policy(self) -> Backoff:
        return self.backoff if self.backoff is not None else default_backoff()


def default_backoff() -> Backoff:
    """The retry policy of job types that declare none: the BACKOFF_* settings."""
    return Backoff(
        base=jobs_settings.BACKOFF_BASE, cap=jobs_settings.BACKOFF_CAP, jitter=jobs_settings.BACKOFF_JITTER
    )
