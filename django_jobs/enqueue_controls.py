"""The producer's controls of an enqueue, checked: unique for a period (``unique_for``), debounce
(``debounce``, ``debounce_key``, ``debounce_keep``) and a start-by deadline (``start_by`` or
``expires_in``); and the two steps ``django_jobs.enqueueing`` runs before its INSERT, in its
transaction, for a key under ``unique_for`` or ``debounce`` (:func:`taken_in_window`,
:func:`debounce_job`). A deadline needs no step: the INSERT writes it.

A call that uses none of them never comes here (``enqueue()`` checks three names against None).
Each refusal raises :class:`~django_jobs.errors.InvalidOption` before anything is written: a
window or a deadline that is not a positive number of seconds, a debounce without its key, a
deadline in the past or before the job is due, and the combinations that contradict each other
(see :func:`validate_controls`). A deadline given as a datetime is compared with the database's
clock (one ``SELECT now()``, in the caller's transaction: the ``now()`` the INSERT counts from).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from django_jobs.enqueue_options import Item, Options, UniqueKey, validate_unique_key
from django_jobs.enqueue_rows import COLUMNS, job_from_row
from django_jobs.errors import InvalidOption
from django_jobs.models import Job
from django_jobs.reads.clock import database_now
from django_jobs.transitions import enqueue as enqueue_sql

#: What a debounced enqueue does with its payload when the job of its key is still pending:
#: "last" replaces that job's payload with the new one, "first" keeps the job's own.
DEBOUNCE_KEEP = ("last", "first")


def asked(**controls: Any) -> dict[str, Any] | None:
    """The controls a call gave (not None), or None when it gave none: the plain path."""
    given = {name: value for name, value in controls.items() if value is not None}
    return given or None


def seconds_of(name: str, value: object) -> float:
    """``value`` (seconds, or a timedelta) as a finite number of seconds > 0."""
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidOption(f"{name} must be seconds or a timedelta, not {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidOption(f"{name} must be a finite number of seconds > 0, not {value!r}")
    return seconds


def _aware(name: str, value: object) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise InvalidOption(f"{name} must be a datetime, not {type(value).__name__}")
    if timezone.is_naive(value):
        if settings.USE_TZ:
            raise InvalidOption(f"{name} must be timezone-aware (USE_TZ is on)")
        value = timezone.make_aware(value)
    return value


def validate_controls(
    options: Options,
    *,
    unique_key: UniqueKey,
    unique_for: Any = None,
    start_by: Any = None,
    expires_in: Any = None,
    debounce: Any = None,
    debounce_key: Any = None,
    debounce_keep: Any = None,
) -> Options:
    """``options`` with the controls asked for, checked.

    Refused: ``unique_for`` without a ``unique_key``; ``debounce`` without a ``debounce_key``
    (or a key or ``debounce_keep`` without ``debounce``); ``debounce`` with ``run_at``/``delay``
    (a debounced job is due at its window's end), with ``unique_key`` (a key held while the job
    runs would forbid the new job a debounce makes once the first started) or with a deadline
    (the debounce moves the start a deadline bounds); ``start_by`` with ``expires_in``; a
    deadline not after the job is due (now, ``run_at`` or ``now + delay``).
    """
    if unique_for is not None:
        if unique_key is None:
            raise InvalidOption("unique_for needs a unique_key: the period is that key's")
        options = dataclasses.replace(options, unique_for=seconds_of("unique_for", unique_for))
    if debounce is not None or debounce_key is not None or debounce_keep is not None:
        options = _debounced(options, unique_key, start_by, expires_in, debounce, debounce_key, debounce_keep)
    if start_by is not None and expires_in is not None:
        raise InvalidOption("give start_by or expires_in, not both")
    if expires_in is not None:
        return _expiring_in(options, seconds_of("expires_in", expires_in))
    if start_by is not None:
        return _starting_by(options, _aware("start_by", start_by))
    return options


def _debounced(
    options: Options,
    unique_key: UniqueKey,
    start_by: Any,
    expires_in: Any,
    debounce: Any,
    debounce_key: Any,
    debounce_keep: Any,
) -> Options:
    if debounce is None:
        raise InvalidOption("debounce_key and debounce_keep need debounce (the window, in seconds)")
    window = seconds_of("debounce", debounce)
    if debounce_key is None:
        raise InvalidOption("debounce needs a debounce_key: the enqueues it merges share it")
    try:
        validate_unique_key(debounce_key)
    except InvalidOption:
        raise InvalidOption("debounce_key must be a non-empty string of at most 200 characters") from None
    keep = "last" if debounce_keep is None else debounce_keep
    if keep not in DEBOUNCE_KEEP:
        raise InvalidOption(f"debounce_keep must be 'last' or 'first', not {debounce_keep!r}")
    if options.run_at is not None or options.delay:
        raise InvalidOption("debounce sets when the job is due (the window's end): give no run_at or delay")
    if unique_key is not None:
        raise InvalidOption(
            "debounce with a unique_key contradicts itself: once the debounced job started, the "
            "next enqueue makes a new job, which a key held by the running one would forbid"
        )
    if start_by is not None or expires_in is not None:
        raise InvalidOption("debounce moves the job's start; a start-by deadline cannot bound it: give one")
    return dataclasses.replace(
        options, delay=window, debounce=window, debounce_key=debounce_key, debounce_replace=keep == "last"
    )


def _expiring_in(options: Options, seconds: float) -> Options:
    if options.run_at is not None:
        now = database_now()
        if options.run_at >= now + dt.timedelta(seconds=seconds):
            raise InvalidOption(
                f"the job would expire before it is due: run_at {options.run_at.isoformat()} is not "
                f"before now + expires_in ({seconds} s)"
            )
    elif seconds <= options.delay:
        raise InvalidOption(
            f"the job would expire before it is due: expires_in {seconds} <= delay {options.delay}"
        )
    return dataclasses.replace(options, expires_in=seconds)


def _starting_by(options: Options, start_by: dt.datetime) -> Options:
    now = database_now()
    if start_by <= now:
        raise InvalidOption(
            f"start_by {start_by.isoformat()} is in the past (the database's clock: {now.isoformat()})"
        )
    due = options.run_at if options.run_at is not None else now + dt.timedelta(seconds=options.delay)
    if start_by <= due:
        raise InvalidOption(
            f"the job would expire before it is due: start_by {start_by.isoformat()} is not after "
            f"its due time {due.isoformat()}"
        )
    return dataclasses.replace(options, start_by=start_by)


def debounce_job(alias: str, options: Options, item: Item) -> Job | None:
    """Lock the debounce key; update its pending, never started job and return it, or None when
    there is none (then the caller inserts the job, under the same lock)."""
    key = options.debounce_key or ""
    window = options.debounce or 0.0
    with connections[alias].cursor() as cursor:
        enqueue_sql.lock_keys(cursor, enqueue_sql.DEBOUNCE_LOCKS, options.type, [key])
        row = enqueue_sql.debounce(
            cursor, COLUMNS, options.type, key, item.encoded, options.debounce_replace, window
        )
    return None if row is None else job_from_row(alias, row)


def taken_in_window(alias: str, options: Options, items: list[Item], result: list[Job | None]) -> set[int]:
    """Lock the unique keys of ``items``; point each item whose key a job holds, or took within
    the ``unique_for`` window, at that job. Returns the indexes of the items so answered."""
    keys = sorted({key for item in items if (key := item.unique_key) is not None})
    if not keys:
        return set()
    with connections[alias].cursor() as cursor:
        enqueue_sql.lock_keys(cursor, enqueue_sql.UNIQUE_FOR_LOCKS, options.type, keys)
        rows = enqueue_sql.in_window(cursor, COLUMNS, options.type, keys, options.unique_for or 0.0)
    takers = {job.unique_key: job for job in (job_from_row(alias, row) for row in rows)}
    taken: set[int] = set()
    for i, item in enumerate(items):
        job = takers.get(item.unique_key) if item.unique_key is not None else None
        if job is not None:
            result[i] = job
            taken.add(i)
    return taken
