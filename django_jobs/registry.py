"""``@job``: registers a handler under a stable type name with its policy.

The type name, not the function's import path, is what is stored with every job: rename or move
the function freely, but never reuse a name for different work.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from django_jobs.backoff import Backoff
from django_jobs.conf import jobs_settings
from django_jobs.limits import RateLimit, concurrency_limit_problem, parse_rate_limit
from django_jobs.names import CALL_NAME_RE, NAME_RE, PRIORITY_RANGE, QUEUE_RE
from django_jobs.schedules import InvalidSchedule, Schedule, from_entry, interval_seconds

if TYPE_CHECKING:
    from django_jobs.runtime.context import JobContext

Handler = Callable[["JobContext", dict[str, Any]], Any]
H = TypeVar("H", bound=Handler)

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


def retry_policy(type_name: str) -> Backoff:
    """The retry policy of a job type; the default one for a type this process does not know."""
    job_type = registry.get(type_name)
    return job_type.retry_policy if job_type is not None else default_backoff()


class AlreadyRegistered(ValueError):
    """Two different handlers claim the same type name."""


class InvalidHandler(TypeError):
    """A handler that cannot be called as ``handler(ctx, payload)``."""


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}

    def register(self, job_type: JobType) -> None:
        existing = self._types.get(job_type.name)
        if existing is not None and _qualname(existing.handler) != _qualname(job_type.handler):
            raise AlreadyRegistered(
                f"job type {job_type.name!r} is already registered by {_qualname(existing.handler)}"
            )
        self._types[job_type.name] = job_type

    def unregister(self, name: str) -> None:
        self._types.pop(name, None)

    def get(self, name: str) -> JobType | None:
        return self._types.get(name)

    def names(self) -> list[str]:
        return sorted(self._types)

    def all(self) -> list[JobType]:
        return list(self._types.values())

    def among(self, names: Iterable[str] | None) -> list[JobType]:
        """The registered job types named in ``names`` (all of them when it is None). A name this
        process has no handler for is left out: nothing here could run its jobs."""
        if names is None:
            return self.all()
        wanted = set(names)
        return [job_type for job_type in self._types.values() if job_type.name in wanted]

    def __contains__(self, name: object) -> bool:
        return name in self._types


registry = Registry()


def declared_schedules() -> list[Schedule]:
    """Every schedule this process knows: its job types' and ``DJANGO_JOBS["SCHEDULES"]``, by name.

    Entries that do not validate, or that name a job type this process has no handler for, are
    left out here; the system checks report them. (Here, not in ``schedules``, which stays a pure
    rule that knows no registry.)
    """
    found = [job_type.schedule for job_type in registry.all() if job_type.schedule is not None]
    for name, entry in sorted(jobs_settings.SCHEDULES.items()):
        try:
            schedule = from_entry(name, entry)
        except InvalidSchedule:
            continue
        if schedule.type in registry:
            found.append(schedule)
    return sorted(found, key=lambda schedule: schedule.name)


def _qualname(handler: Callable[..., Any]) -> str:
    """Where the handler is defined: ``module.function`` (the wrapped one of a ``partial``, the
    class of a callable instance)."""
    target: Any = handler.func if isinstance(handler, functools.partial) else handler
    if not hasattr(target, "__qualname__"):  # a callable instance: its class names it
        target = type(target)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def refuse_unfit_handler(name: str, handler: Any) -> None:
    """Raise ``InvalidHandler`` unless ``handler(ctx, payload)`` is a call it accepts.

    Refused here, at import time, a handler that cannot take ``(ctx, payload)`` would otherwise
    pass every check and then fail each attempt at run time with an opaque ``UNKNOWN``.
    """
    if not callable(handler):
        raise InvalidHandler(f"@job({name!r}) must decorate a function, not {type(handler).__name__}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # a builtin without introspectable parameters: nothing to hold against it
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise InvalidHandler(
            f"job handler {_qualname(handler)}{signature} for type {name!r} cannot be called as "
            f"handler(ctx, payload): {exc}. Take exactly two positional parameters, "
            "e.g. def handler(ctx, payload)."
        ) from None


def job(
    name: str,
    *,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    timeout: float | None = None,
    version: int = 1,
    upcasters: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    lease_timeout: float | None = None,
    heartbeat: bool = True,
    on_lost: str | None = None,
    reconcile: Reconciler | None = None,
    sla: float | None = None,
    sensitive: tuple[str, ...] | list[str] = (),
    concurrency_key: KeyFunction | None = None,
    concurrency_limit: int = 1,
    rate_limit: str | None = None,
    external_calls: tuple[str, ...] | list[str] = (),
    schedule: str | float | dt.timedelta | None = None,
    tz: str = "UTC",
    misfire_grace: float | None = None,
    on_running: str = "skip",
) -> Callable[[H], H]:
    """Register the decorated ``handler(ctx, payload)`` as job type ``name``.

    ``schedule`` (a cron expression, evaluated in ``tz``, or an interval in seconds or as a
    timedelta) makes the workers enqueue this type once per tick with an empty payload; see
    ``django_jobs.schedules`` for ``misfire_grace`` and ``on_running``.

    Raises ``ValueError`` for an invalid name or policy, at import time rather than at the
    first enqueue, ``InvalidHandler`` (a ``TypeError``) for a handler that cannot be called as
    ``handler(ctx, payload)``, and ``AlreadyRegistered`` when another handler owns ``name``.
    """
    if not NAME_RE.match(name):
        raise ValueError(f"invalid job type name {name!r}: use letters, digits and _ . : -")
    if queue is not None and not QUEUE_RE.match(queue):
        raise ValueError(f"invalid queue name {queue!r}")
    if isinstance(priority, bool) or priority not in PRIORITY_RANGE:
        raise ValueError("priority must be an integer between -100 and 100")
    if max_attempts is not None and (isinstance(max_attempts, bool) or max_attempts < 1):
        raise ValueError("max_attempts must be an integer >= 1")
    if timeout is not None and not timeout > 0:
        raise ValueError("timeout must be > 0 seconds")
    if isinstance(version, bool) or version < 1:
        raise ValueError("version must be an integer >= 1")
    if lease_timeout is not None and not lease_timeout > 0:
        raise ValueError("lease_timeout must be > 0 seconds")
    on_lost = on_lost or ("reconcile" if reconcile is not None else "retry")
    if on_lost not in ON_LOST_CHOICES:
        raise ValueError(f"on_lost must be one of {', '.join(ON_LOST_CHOICES)}")
    if sla is not None and not sla > 0:
        raise ValueError("sla must be > 0 seconds")
    if on_lost == "reconcile" and reconcile is None:
        raise ValueError('on_lost="reconcile" needs a reconcile function')
    if isinstance(sensitive, str) or not all(isinstance(key, str) and key for key in sensitive):
        raise ValueError('sensitive must be a tuple of payload key names, e.g. sensitive=("card",)')
    if concurrency_key is not None and not callable(concurrency_key):
        raise ValueError("concurrency_key must be a function of the payload; give a fixed key to enqueue()")
    problem = concurrency_limit_problem(concurrency_limit)
    if problem is not None:
        raise ValueError(problem)
    rate = parse_rate_limit(rate_limit) if rate_limit is not None else None
    if isinstance(external_calls, str) or not all(
        isinstance(call, str) and CALL_NAME_RE.match(call) for call in external_calls
    ):
        raise ValueError(
            "external_calls must be a tuple of call names (1-100 letters, digits and _ . : -), "
            'e.g. external_calls=("charge",)'
        )

    planned = None
    if schedule is not None:
        planned = Schedule(
            name=name,
            type=name,
            cron=schedule if isinstance(schedule, str) else None,
            every=None if isinstance(schedule, str) else interval_seconds(schedule),
            tz=tz,
            misfire_grace=misfire_grace,
            on_running=on_running,
        )  # raises InvalidSchedule, a ValueError, for a bad expression or time zone

    def decorator(handler: H) -> H:
        refuse_unfit_handler(name, handler)
        registry.register(
            JobType(
                name=name,
                handler=handler,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                backoff=backoff,
                timeout=timeout,
                version=version,
                upcasters=dict(upcasters or {}),
                lease_timeout=lease_timeout,
                heartbeat=heartbeat,
                on_lost=on_lost,
                reconcile=reconcile,
                sla=sla,
                sensitive=tuple(sensitive),
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                rate_limit=rate,
                external_calls=tuple(dict.fromkeys(external_calls)),
                schedule=planned,
            )
        )
        # A bound method takes no attributes: enqueue it by its type name.
        with contextlib.suppress(AttributeError):
            handler.job_name = name  # type: ignore[attr-defined]  # lets enqueue(handler, ...) work
        return handler

    return decorator
