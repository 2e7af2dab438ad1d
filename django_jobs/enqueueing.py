"""``enqueue()`` / ``enqueue_many()``: validate everything, then INSERT in the caller's
transaction.

Nothing is written until every job of the call has been validated (``enqueue_options``), so a
bad input raises an :class:`~django_jobs.errors.EnqueueError` and leaves the database as it was.
The statements are ``transitions.enqueue``'s; this module runs them on the caller's connection
(inside ``transaction.atomic()`` the job commits or rolls back with the business writes around
it), turns their rows into ``Job`` instances (``enqueue_rows``) and tells who listens
(``job_enqueued``, metrics).

Over 300 lines: ``enqueue()`` is the one face of every option a producer gives (keys, the
producer's controls of ``enqueue_controls``, a durable job's signal key), and the insert they
share decides per call which statements run and in which transaction; the rules of each
option live in their own modules, and what is left here is how they combine.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any, Protocol

from django.db import transaction

from django_jobs import signals
from django_jobs.conf import jobs_settings
from django_jobs.durable import give_key
from django_jobs.durable_rules import InvalidSignal, check_key
from django_jobs.enqueue_controls import asked, debounce_job, taken_in_window, validate_controls
from django_jobs.enqueue_options import (
    ConcurrencyKey,
    Item,
    Options,
    TypeRef,
    UniqueKey,
    encode_payload,
    resolve_type,
    validate_items,
    validate_options,
)
from django_jobs.enqueue_rows import fill_from_holders, job_maker, unsaved_jobs
from django_jobs.errors import InvalidOption
from django_jobs.models import Job
from django_jobs.observe import metrics, tracing
from django_jobs.transitions import enqueue as enqueue_sql
from django_jobs.transitions.cursor import django_bound_cursor, prepares_statements

# The key and type aliases and encode_payload are defined with the validation, importable here.
__all__ = ["ConcurrencyKey", "TypeRef", "UniqueKey", "capture", "encode_payload", "enqueue", "enqueue_many"]


class Capture(Protocol):
    def __call__(self, jobs: list[Job], delay: float, insert: Callable[[], list[Job]]) -> list[Job]: ...


#: Set while ``django_jobs.testing.enqueued_jobs()`` records a block: it sees every call that
#: passed validation (its jobs, unsaved, and the delay asked for), records it, and returns the
#: jobs ``insert()`` wrote, or the unsaved ones when the block keeps them out of the database.
capture: Capture | None = None


#: The controls of enqueue(), in its order; a call that gives none compares one tuple.
_CONTROLS = ("unique_for", "start_by", "expires_in", "debounce", "debounce_key", "debounce_keep")
_NOTHING_GIVEN = (None,) * len(_CONTROLS)


def enqueue(
    type_or_handler: TypeRef,
    payload: dict[str, Any],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    delay: float | dt.timedelta | None = None,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
    unique_for: float | dt.timedelta | None = None,
    start_by: dt.datetime | None = None,
    expires_in: float | dt.timedelta | None = None,
    debounce: float | dt.timedelta | None = None,
    debounce_key: str | None = None,
    debounce_keep: str | None = None,
    signal_key: str | None = None,
) -> Job:
    """Create one pending job and return its row.

    ``type_or_handler`` is a registered type name or a function decorated with ``@job``.
    ``run_at`` (an aware datetime) or ``delay`` (seconds or a timedelta, counted from the
    database's ``now()``) postpone the first run. With ``unique_key``, while a job of the same
    type and key is pending, running or parked in ``needs_review``, no new job is created and
    that job is returned. With ``concurrency_key`` (default: the type's ``concurrency_key``
    function of the payload, if it has one), at most the type's ``concurrency_limit`` jobs of
    this type with that key run at once; the others wait, pending, without using attempts.
    With ``signal_key`` (``"stripe:pi_123"``), ``django_jobs.signal(signal_key, ...)`` reaches
    this job's ``ctx.wait_for()`` (docs/durable-jobs.md); a key addresses one job.

    The producer's controls (docs/writing-jobs.md), each costing nothing when not given:

    - ``unique_for`` (seconds or a timedelta, with ``unique_key``): the key stays taken for that
      long after a job with it was created or ended, by the database's clock; meanwhile that
      job is returned, as for a held key.
    - ``debounce`` (seconds or a timedelta) with ``debounce_key``: the job is due at the
      window's end; while it is pending and has never started, a later enqueue of the type and
      key updates it instead of making another (its payload replaced, or kept with
      ``debounce_keep="first"``, and its start pushed to the new window's end) and returns it.
      Once it started, the next enqueue makes a new job.
    - ``start_by`` (an aware datetime) or ``expires_in`` (seconds or a timedelta from the
      database's now()): a job not started by then never starts; it ends ``cancelled`` with
      code ``EXPIRED``.

    Concurrent enqueues of one key (``unique_for``, ``debounce``) take turns on an advisory
    lock held until the caller's transaction ends, so exactly one job results.

    Raises ``UnknownJobType``, ``InvalidPayload``, ``PayloadTooLarge`` or ``InvalidOption``
    (all subclasses of ``EnqueueError``, itself a ``ValueError``) before writing anything, and
    ``InvalidOption`` for a bad ``signal_key`` or one another job has (then nothing is kept).
    """
    given = (unique_for, start_by, expires_in, debounce, debounce_key, debounce_keep)
    if signal_key is not None:
        if (debounce, debounce_key, debounce_keep) != (None, None, None):
            # A debounced enqueue may update a job made before; a signal key names the one it makes.
            raise InvalidOption("signal_key cannot be combined with debounce: a key addresses one job")
        return _enqueue_addressed(
            type_or_handler, payload, signal_key, queue=queue, priority=priority, run_at=run_at,
            delay=delay, max_attempts=max_attempts, unique_key=unique_key, concurrency_key=concurrency_key,
            unique_for=unique_for, start_by=start_by, expires_in=expires_in,
        )  # fmt: skip
    return _enqueue(
        type_or_handler,
        [payload],
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        unique_key=unique_key,
        concurrency_key=concurrency_key,
        controls=None if given == _NOTHING_GIVEN else asked(**dict(zip(_CONTROLS, given, strict=True))),
    )[0]


def _enqueue_addressed(type_or_handler: TypeRef, payload: dict[str, Any], key: str, **options: Any) -> Job:
    """:func:`enqueue` of a job given signal key ``key``: both in one transaction, or neither."""
    try:
        check_key(key)
    except InvalidSignal as exc:
        raise InvalidOption(str(exc)) from None
    with transaction.atomic(using=jobs_settings.DATABASE):
        job = enqueue_many(type_or_handler, [payload], **options)[0]
        if job.pk is not None:  # None: enqueued_jobs() kept it out of the database
            try:
                give_key(job.pk, key)
            except InvalidSignal as exc:
                raise InvalidOption(f"{exc}; nothing was enqueued") from None
    return job


def enqueue_many(
    type_or_handler: TypeRef,
    payloads: Iterable[dict[str, Any]],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    delay: float | dt.timedelta | None = None,
    max_attempts: int | None = None,
    unique_key: UniqueKey = None,
    concurrency_key: ConcurrencyKey = None,
    unique_for: float | dt.timedelta | None = None,
    start_by: dt.datetime | None = None,
    expires_in: float | dt.timedelta | None = None,
) -> list[Job]:
    """Create one job per payload, all or none, and return the rows in the payloads' order.

    The options apply to every job; ``unique_key`` and ``concurrency_key`` may be functions
    ``payload → key or None``; ``unique_for``, ``start_by`` and ``expires_in`` are as for
    :func:`enqueue` (a debounce merges the enqueues of one job: it is ``enqueue()``'s alone).
    Raises like :func:`enqueue` — for the first bad payload, with its index — before writing.
    """
    controls = asked(unique_for=unique_for, start_by=start_by, expires_in=expires_in)
    return _enqueue(
        type_or_handler,
        payloads,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        unique_key=unique_key,
        concurrency_key=concurrency_key,
        controls=controls,
    )


def _enqueue(
    type_or_handler: TypeRef,
    payloads: Iterable[dict[str, Any]],
    *,
    queue: str | None,
    priority: int | None,
    run_at: dt.datetime | None,
    delay: float | dt.timedelta | None,
    max_attempts: int | None,
    unique_key: UniqueKey,
    concurrency_key: ConcurrencyKey,
    controls: dict[str, Any] | None,
) -> list[Job]:
    job_type = resolve_type(type_or_handler)
    options = validate_options(job_type, queue, priority, run_at, delay, max_attempts)
    items = validate_items(job_type, payloads, unique_key, concurrency_key)
    if controls is not None:
        options = validate_controls(options, unique_key=unique_key, **controls)
    if not items:
        return []
    if capture is not None:
        return capture(unsaved_jobs(options, items), options.delay, lambda: _insert(options, items))
    if tracing.enabled():
        return _insert_traced(options, items)
    return _insert(options, items)


def _insert_traced(options: Options, items: list[Item]) -> list[Job]:
    """:func:`_insert` inside a ``send`` span, whose context each new job stores."""
    with tracing.enqueue_span(options.queue, options.type, len(items)) as span:
        if span is None:  # the provider went away since: no span after all
            return _insert(options, items)
        jobs = _insert(dataclasses.replace(options, trace_context=span.context), items)
        span.wrote([job.id for job in jobs])
        return jobs


def _insert(options: Options, items: list[Item]) -> list[Job]:
    alias = jobs_settings.DATABASE
    result: list[Job | None] = [None] * len(items)
    made = [False] * len(items)  # the item created its job (not deduplicated onto another)
    make_job = job_maker(alias, options)
    shared = options.statement_params()
    rows = [(item.encoded, item.unique_key, item.concurrency_key) for item in items]
    locks = options.unique_for is not None or options.debounce is not None
    # One INSERT is atomic by itself; several (a large enqueue_many) share a transaction, so
    # the call is all or nothing even in autocommit mode; so do the lock of a key and the
    # statements it guards (in the caller's transaction, the lock is held until it ends).
    atomic = (
        transaction.atomic(using=alias)
        if locks or len(items) > enqueue_sql.ROWS_PER_INSERT
        else nullcontext()
    )
    # A lone job, most enqueue() calls, reuses the connection's kept cursor.
    statements = django_bound_cursor(
        alias, prepare=prepares_statements(alias), binary_results=True, kept=len(items) == 1
    )
    with atomic, statements as cursor:
        if options.debounce is not None:
            debounced = debounce_job(alias, options, items[0])
            if debounced is not None:
                return [debounced]
        taken = taken_in_window(alias, options, items, result) if options.unique_for is not None else set()
        # Rows without a key first: none of them can be dropped by ON CONFLICT, so RETURNING
        # lines up with them one to one; keyed rows are matched by their key.
        todo = [i for i, item in enumerate(items) if item.unique_key is None]
        todo += [i for i, item in enumerate(items) if item.unique_key is not None and i not in taken]
        # A key's holder can finish between our INSERT and our SELECT; then we insert again.
        while todo:
            returned = iter(enqueue_sql.insert(cursor, shared, [rows[i] for i in todo]))
            by_key: dict[str, tuple[Any, ...]] = {}
            keyed: list[int] = []
            for i in todo:
                if items[i].unique_key is None:
                    result[i] = make_job(items[i], next(returned))
                    made[i] = True
                else:
                    keyed.append(i)
            for row in returned:
                by_key[row[1]] = row
            missing: list[int] = []
            created: dict[str, Job] = {}  # a key repeated within the batch: the first item won
            for i in keyed:
                key = items[i].unique_key or ""
                if key in created:
                    result[i] = created[key]
                elif key in by_key:
                    result[i] = created[key] = make_job(items[i], by_key[key])
                    made[i] = True
                else:
                    missing.append(i)
            todo = fill_from_holders(alias, options, items, missing, result)
    if signals.listened(signals.job_enqueued):
        announce(alias, [job for job, new in zip(result, made, strict=True) if new and job is not None])
    if metrics.AVAILABLE or metrics.OTEL_AVAILABLE:
        # Counted as written, not at commit: an on_commit callback of ours would show up among
        # the callbacks of every user's test that counts them.
        metrics.enqueued((job.type, job.queue) for job, new in zip(result, made, strict=True) if new and job)
    return [job for job in result if job is not None]


def announce(alias: str, jobs: list[Job]) -> None:
    """Send ``job_enqueued`` for the jobs a call created, once they are committed (a workflow's
    too: ``django_jobs.workflows``)."""

    def send() -> None:
        for job in jobs:
            signals.send(signals.job_enqueued, Job, job=job)

    signals.after_commit(alias, send)
