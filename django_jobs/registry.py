"""``@job``: registers a handler under a stable type name with its policy.

The type name, not the function's import path, is what is stored with every job: rename or move
the function freely, but never reuse a name for different work.

Here: the ``Registry`` of the job types this process has handlers for, ``@job`` (which refuses
a bad name or policy at import time), the lookups made of it (``retry_policy``,
``declared_schedules``). A job type and its policy are in ``job_types``; what a handler is, and
the check that one can be called as ``handler(ctx, payload)``, in ``handlers``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django_jobs.backoff import Backoff
from django_jobs.conf import jobs_settings
from django_jobs.handlers import Handler, qualname, refuse_unfit_handler
from django_jobs.handlers import InvalidHandler as InvalidHandler
from django_jobs.job_types import ON_LOST_CHOICES as ON_LOST_CHOICES
from django_jobs.job_types import JobType as JobType
from django_jobs.job_types import KeyFunction, Reconciler, default_backoff
from django_jobs.job_types import Reconciliation as Reconciliation
from django_jobs.limits import concurrency_limit_problem, parse_rate_limit
from django_jobs.names import CALL_NAME_RE, NAME_RE, PRIORITY_RANGE, QUEUE_RE, SEARCH_FIELD_RE
from django_jobs.schedules import InvalidSchedule, Schedule, from_entry, interval_seconds

H = TypeVar("H", bound=Handler)


def retry_policy(type_name: str) -> Backoff:
    """The retry policy of a job type; the default one for a type this process does not know."""
    job_type = registry.get(type_name)
    return job_type.retry_policy if job_type is not None else default_backoff()


class AlreadyRegistered(ValueError):
    """Two different handlers claim the same type name."""


class Registry:
    """The job types this process has handlers for, by type name."""

    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}

    def register(self, job_type: JobType) -> None:
        existing = self._types.get(job_type.name)
        if existing is not None and qualname(existing.handler) != qualname(job_type.handler):
            raise AlreadyRegistered(
                f"job type {job_type.name!r} is already registered by {qualname(existing.handler)}"
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
    search: tuple[str, ...] | list[str] = (),
    concurrency_key: KeyFunction | None = None,
    concurrency_limit: int = 1,
    rate_limit: str | None = None,
    external_calls: tuple[str, ...] | list[str] = (),
    external: bool | None = None,
    schedule: str | float | dt.timedelta | None = None,
    tz: str = "UTC",
    misfire_grace: float | None = None,
    on_running: str = "skip",
) -> Callable[[H], H]:
    """Register the decorated ``handler(ctx, payload)`` as job type ``name``.

    ``external=True`` says that its effects may be outside the database (a charge, a mail, a
    webhook): its jobs wait while a restore hold is open (docs/operations/restore.md).
    ``external=False`` says they all stay in the database, which a restore takes back with them:
    its jobs run through a hold. A type that says nothing is held too (unknown means outside),
    and ``manage.py check`` names it (``django_jobs.W008``); ``external_calls``, a ``reconcile``
    or ``on_lost="needs_review"`` say that it acts outside, and refuse ``external=False``.

    ``schedule`` (a cron expression, evaluated in ``tz``, or an interval in seconds or as a
    timedelta) makes the workers enqueue this type once per tick with an empty payload; see
    ``django_jobs.schedules`` for ``misfire_grace`` and ``on_running``.

    ``search`` names top-level payload keys the console's search finds this type's jobs by
    (``order_id=A-1234``), each once ``manage.py jobsindexes --create`` has built its index
    (``reads.search_fields``). A sensitive key is refused: a search would let people who may
    not see its values test guesses of them.

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
    searchable = _search_fields(search, sensitive)
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

    if external is not None and not isinstance(external, bool):
        raise ValueError("external must be True or False (or left out: then taken as True)")
    if external is False:
        says_outside = [
            what
            for what, said in (
                ("external_calls", bool(external_calls)),
                ("reconcile", reconcile is not None),
                ('on_lost="needs_review"', on_lost == "needs_review"),
            )
            if said
        ]
        if says_outside:
            raise ValueError(
                f"external=False says every effect stays in the database, but {' and '.join(says_outside)} "
                "says it reaches outside: drop external=False"
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
                search=searchable,
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                rate_limit=rate,
                external_calls=tuple(dict.fromkeys(external_calls)),
                external=external,
                schedule=planned,
            )
        )
        # A bound method takes no attributes: enqueue it by its type name.
        with contextlib.suppress(AttributeError):
            handler.job_name = name  # type: ignore[attr-defined]  # lets enqueue(handler, ...) work
        return handler

    return decorator


def _search_fields(search: object, sensitive: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``@job(search=...)`` checked: a tuple or list of distinct key names that an index can be
    named after, none of them sensitive. Raises ``ValueError`` saying which key and why."""
    if not isinstance(search, tuple | list):
        # A bare string would otherwise be read letter by letter: search="order_id" is a slip.
        raise ValueError('search must be a tuple of payload key names, e.g. search=("order_id",)')
    for field in search:
        if not isinstance(field, str) or not SEARCH_FIELD_RE.match(field):
            raise ValueError(
                f"search: {str(field)[:50]!r} is not a searchable payload key: 1-40 ASCII letters, "
                "digits and _, not starting with a digit (its index is named after it)"
            )
    repeated = sorted({field for field in search if search.count(field) > 1})
    if repeated:
        raise ValueError(f"search names {', '.join(map(repr, repeated))} more than once")
    secret = {key.casefold() for key in sensitive}
    for field in search:
        if field.casefold() in secret or _matches_sensitive_pattern(field):
            raise ValueError(
                f"search: payload key {field!r} is sensitive (sensitive= or SENSITIVE_PAYLOAD_KEYS): "
                "its values must not be searchable, nor copied into an index"
            )
    return tuple(search)


def _matches_sensitive_pattern(key: str) -> bool:
    """Whether one of the project's ``SENSITIVE_PAYLOAD_KEYS`` matches ``key``, as the console's
    masking tests it. A setting or pattern that does not compile is the system check's to
    report (E011)."""
    try:
        patterns = jobs_settings.SENSITIVE_PAYLOAD_KEYS
    except TypeError:
        return False
    for pattern in patterns:
        try:
            if re.search(pattern, key, re.IGNORECASE):
                return True
        except (re.error, TypeError):
            continue
    return False
