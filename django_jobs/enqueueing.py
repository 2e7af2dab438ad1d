"""``enqueue()`` / ``enqueue_many()``: validate everything, then INSERT in the caller's
transaction.

Nothing is written until every job of the call has been validated, so a bad input raises an
:class:`~django_jobs.errors.EnqueueError` and leaves the database as it was. The INSERT runs on
the caller's connection: inside ``transaction.atomic()`` the job commits or rolls back with the
business writes around it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.db import connections, transaction
from django.db.models import NOT_PROVIDED, Value
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from django_jobs import signals
from django_jobs.conf import jobs_settings
from django_jobs.errors import (
    InvalidOption,
    InvalidPayload,
    PayloadTooLarge,
    UnknownJobType,
    UnknownQueue,
    undeclared_queue,
)
from django_jobs.jsonvalues import encode, plain_json_problem
from django_jobs.limits import concurrency_key_problem
from django_jobs.models import Job
from django_jobs.observe import metrics
from django_jobs.registry import PRIORITY_RANGE, QUEUE_RE, JobType, registry
from django_jobs.states import KEY_HOLDING_STATUSES
from django_jobs.transitions.cursor import django_bound_cursor

TypeRef = str | Callable[..., Any]
UniqueKey = str | Callable[[dict[str, Any]], str | None] | None
ConcurrencyKey = UniqueKey

_ROWS_PER_INSERT = 5000
_MAX_UNIQUE_KEY = 200


class Capture(Protocol):
    def __call__(self, jobs: list[Job], delay: float, insert: Callable[[], list[Job]]) -> list[Job]: ...


#: Set while ``django_jobs.testing.enqueued_jobs()`` records a block: it sees every call that
#: passed validation (its jobs, unsaved, and the delay asked for), records it, and returns the
#: jobs ``insert()`` wrote, or the unsaved ones when the block keeps them out of the database.
capture: Capture | None = None


@dataclass(frozen=True, slots=True)
class _Options:
    """What every job of one call shares."""

    queue: str
    type: str
    version: int
    priority: int
    run_at: dt.datetime | None
    delay: float
    max_attempts: int
    on_lost: str
    concurrency_limit: int
    on_lost_in_call: str | None


@dataclass(frozen=True, slots=True)
class _Item:
    payload: dict[str, Any]
    encoded: str  # the payload as JSON text, validated
    unique_key: str | None
    concurrency_key: str | None


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
) -> Job:
    """Create one pending job and return its row.

    ``type_or_handler`` is a registered type name or a function decorated with ``@job``.
    ``run_at`` (an aware datetime) or ``delay`` (seconds or a timedelta, counted from the
    database's ``now()``) postpone the first run. With ``unique_key``, while a job of the same
    type and key is pending, running or parked in ``needs_review``, no new job is created and
    that job is returned. With ``concurrency_key`` (default: the type's ``concurrency_key``
    function of the payload, if it has one), at most the type's ``concurrency_limit`` jobs of
    this type with that key run at once; the others wait, pending, without using attempts.

    Raises ``UnknownJobType``, ``InvalidPayload``, ``PayloadTooLarge`` or ``InvalidOption``
    (all subclasses of ``EnqueueError``, itself a ``ValueError``) before writing anything.
    """
    return enqueue_many(
        type_or_handler,
        [payload],
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        unique_key=unique_key,
        concurrency_key=concurrency_key,
    )[0]


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
) -> list[Job]:
    """Create one job per payload, all or none, and return the rows in the payloads' order.

    The options apply to every job; ``unique_key`` and ``concurrency_key`` may be functions
    ``payload → key or None``.
    Raises like :func:`enqueue` — for the first bad payload, with its index — before writing.
    """
    job_type = _resolve_type(type_or_handler)
    options = _validate_options(job_type, queue, priority, run_at, delay, max_attempts)
    key_of = concurrency_key if concurrency_key is not None else job_type.concurrency_key
    items: list[_Item] = []
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    for index, payload in enumerate(payloads):
        try:
            encoded = encode_payload(payload, limit)
            key = unique_key(payload) if callable(unique_key) else unique_key
            _validate_unique_key(key)
            concurrency = key_of(payload) if callable(key_of) else key_of
            problem = concurrency_key_problem(concurrency)
            if problem is not None:
                raise InvalidOption(problem)
        except (InvalidPayload, InvalidOption) as exc:
            if index == 0 and isinstance(payloads, Sequence) and len(payloads) == 1:
                raise
            raise type(exc)(f"payload #{index}: {exc}") from exc
        items.append(_Item(payload, encoded, key, concurrency))
    if not items:
        return []
    if capture is not None:
        return capture(_unsaved(options, items), options.delay, lambda: _insert(options, items))
    return _insert(options, items)


# ---- validation -----------------------------------------------------------------------------


def _resolve_type(type_or_handler: TypeRef) -> JobType:
    name = type_or_handler if isinstance(type_or_handler, str) else getattr(type_or_handler, "job_name", None)
    if name is None:
        raise UnknownJobType(f"{type_or_handler!r} is not a job type name nor a @job handler")
    job_type = registry.get(name)
    if job_type is None:
        known = ", ".join(registry.names()) or "none"
        raise UnknownJobType(f"unknown job type {name!r} (registered: {known})")
    return job_type


def _validate_options(
    job_type: JobType,
    queue: str | None,
    priority: int | None,
    run_at: dt.datetime | None,
    delay: float | dt.timedelta | None,
    max_attempts: int | None,
) -> _Options:
    queue = job_type.default_queue if queue is None else queue
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        raise InvalidOption(f"invalid queue {queue!r}: 1-100 letters, digits and _ . : -")
    declared = jobs_settings.QUEUES
    if declared is not None and queue not in declared:
        raise UnknownQueue(undeclared_queue(queue, declared) + "; nothing was enqueued")
    priority = job_type.priority if priority is None else priority
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise InvalidOption(f"invalid priority {priority!r}: an integer between -100 and 100")
    max_attempts = job_type.default_max_attempts if max_attempts is None else max_attempts
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
        raise InvalidOption(f"invalid max_attempts {max_attempts!r}: an integer between 1 and 1000")
    if run_at is not None and delay is not None:
        raise InvalidOption("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise InvalidOption(f"run_at must be a datetime, not {type(run_at).__name__}")
        if timezone.is_naive(run_at):
            if settings.USE_TZ:
                raise InvalidOption("run_at must be timezone-aware (USE_TZ is on)")
            run_at = timezone.make_aware(run_at)
    seconds = 0.0
    if delay is not None:
        if isinstance(delay, dt.timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise InvalidOption(f"delay must be seconds or a timedelta, not {type(delay).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidOption(f"delay must be a finite number of seconds >= 0, not {delay!r}")
    return _Options(
        queue,
        job_type.name,
        job_type.version,
        priority,
        run_at,
        seconds,
        max_attempts,
        job_type.on_lost,
        job_type.concurrency_limit,
        job_type.on_lost_in_call,
    )


def _validate_unique_key(key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str) or not key or len(key) > _MAX_UNIQUE_KEY:
        raise InvalidOption(f"unique_key must be a non-empty string of at most {_MAX_UNIQUE_KEY} characters")


def encode_payload(payload: object, limit: int | None = None) -> str:
    """Encode a payload as JSON after checking it round-trips unchanged through jsonb.

    Raises ``InvalidPayload`` for anything but a dict of plain JSON values (str keys; no
    tuples, sets, dates, NaN or NUL characters) and ``PayloadTooLarge`` past the size limit.
    """
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a dict (a JSON object), not {type(payload).__name__}")
    problem = plain_json_problem(payload, "payload")
    if problem is not None:
        raise InvalidPayload(problem)
    encoded = encode(payload)
    if limit is None:
        limit = jobs_settings.MAX_PAYLOAD_BYTES
    # A character is at most 4 bytes in UTF-8: most payloads are clear of the limit uncounted.
    if len(encoded) * 4 > limit and (size := len(encoded.encode())) > limit:
        raise PayloadTooLarge(f"payload is {size} bytes encoded, over the limit of {limit} bytes")
    return encoded


# ---- insertion ------------------------------------------------------------------------------

_FIELDS = Job._meta.concrete_fields
_COLUMNS: list[str] = [str(f.column) for f in _FIELDS]
_ATTNAMES = [f.attname for f in _FIELDS]


def _stored_default(field: Any) -> Any:
    """What the database puts in a column the INSERT leaves out (None for an expression: the
    INSERT returns those it needs)."""
    default = field.db_default
    if isinstance(default, Value):
        return default.value
    return None if default is NOT_PROVIDED or hasattr(default, "resolve_expression") else default


#: Columns the INSERT leaves to their database default, as the new row holds them.
_LEFT_TO_DEFAULTS = {f.attname: _stored_default(f) for f in _FIELDS}
_HOLDING = ", ".join(f"'{status}'" for status in sorted(KEY_HOLDING_STATUSES))

# One statement per chunk, whatever its size: the shared options are scalars and the per-job
# values two arrays, so neither the SQL text nor its parsing grows with the batch (a VALUES
# list of thousands of placeholders costs more on the client than the INSERT on the server).
# ON CONFLICT names the partial unique index by its columns and predicate: a job whose key is
# held by an active job of its type is not inserted, and the caller gets the holder instead.
# RETURNING follows the order of unnest(), as Django's own bulk_create relies on. The two
# timestamps are the same for every row of the statement (now() is the transaction's; the due
# time is computed once), so only the first row carries them: loading a timestamp costs more
# than the rest of a row.
_INSERT = (
    "WITH made AS (INSERT INTO django_jobs_job"
    " (queue, type, version, payload, status, priority, available_at, attempts, max_attempts, unique_key,"
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call)"
    " SELECT %(queue)s, %(type)s, %(version)s, r.payload::jsonb, 'pending', %(priority)s,"
    " COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)), 0, %(max_attempts)s,"
    " r.unique_key, %(on_lost)s, r.concurrency_key,"
    " CASE WHEN r.concurrency_key IS NOT NULL THEN %(concurrency_limit)s::int END, %(on_lost_in_call)s"
    " FROM unnest(%(payloads)s::text[], %(keys)s::text[], %(concurrency_keys)s::text[])"
    " AS r(payload, unique_key, concurrency_key)"
    " ON CONFLICT (type, unique_key)"
    f" WHERE status IN ({_HOLDING}) AND unique_key IS NOT NULL DO NOTHING"
    " RETURNING id, unique_key, available_at, created_at)"
    " SELECT id, unique_key, CASE WHEN row_number() OVER () = 1 THEN available_at END,"
    " CASE WHEN row_number() OVER () = 1 THEN created_at END FROM made"
)
# A single job (every enqueue()) takes a plain VALUES row: the server plans it in a fraction of
# the time the CTE over unnest() takes, which is most of a lone INSERT's cost.
_INSERT_ONE = (
    "INSERT INTO django_jobs_job"
    " (queue, type, version, payload, status, priority, available_at, attempts, max_attempts, unique_key,"
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call)"
    " VALUES (%(queue)s, %(type)s, %(version)s, %(payload)s::jsonb, 'pending', %(priority)s,"
    " COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)), 0, %(max_attempts)s,"
    " %(key)s, %(on_lost)s, %(concurrency_key)s, %(concurrency_limit)s::int, %(on_lost_in_call)s)"
    " ON CONFLICT (type, unique_key)"
    f" WHERE status IN ({_HOLDING}) AND unique_key IS NOT NULL DO NOTHING"
    " RETURNING id, unique_key, available_at, created_at"
)
_SELECT_HOLDERS = (
    "SELECT " + ", ".join(_COLUMNS) + " FROM django_jobs_job"
    f" WHERE type = %s AND unique_key = ANY(%s) AND status IN ({_HOLDING})"
)


def _insert(options: _Options, items: list[_Item]) -> list[Job]:
    alias = jobs_settings.DATABASE
    result: list[Job | None] = [None] * len(items)
    made = [False] * len(items)  # the item created its job (not deduplicated onto another)
    make_job = _job_maker(alias, options)
    # One INSERT is atomic by itself; several (a large enqueue_many) share a transaction, so
    # the call is all or nothing even in autocommit mode.
    atomic = transaction.atomic(using=alias) if len(items) > _ROWS_PER_INSERT else nullcontext()
    with atomic, django_bound_cursor(alias) as cursor:
        # Rows without a key first: none of them can be dropped by ON CONFLICT, so RETURNING
        # lines up with them one to one; keyed rows are matched by their key.
        todo = [i for i, item in enumerate(items) if item.unique_key is None]
        todo += [i for i, item in enumerate(items) if item.unique_key is not None]
        # A key's holder can finish between our INSERT and our SELECT; then we insert again.
        while todo:
            returned = iter(_insert_chunks(cursor, options, [items[i] for i in todo]))
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
            todo = _fill_from_holders(cursor, alias, options, items, missing, result)
    if signals.listened(signals.job_enqueued):
        _announce(alias, [job for job, new in zip(result, made, strict=True) if new and job is not None])
    if metrics.AVAILABLE:
        # Counted as written, not at commit: an on_commit callback of ours would show up among
        # the callbacks of every user's test that counts them.
        metrics.enqueued((job.type, job.queue) for job, new in zip(result, made, strict=True) if new and job)
    return [job for job in result if job is not None]


def _announce(alias: str, jobs: list[Job]) -> None:
    """Send ``job_enqueued`` for the jobs this call created, once they are committed."""

    def send() -> None:
        for job in jobs:
            signals.send(signals.job_enqueued, Job, job=job)

    signals.after_commit(alias, send)


def _insert_chunks(cursor: Any, options: _Options, items: list[_Item]) -> list[tuple[Any, ...]]:
    if len(items) == 1:
        item = items[0]
        cursor.execute(
            _INSERT_ONE,
            {
                "queue": options.queue,
                "type": options.type,
                "version": options.version,
                "priority": options.priority,
                "run_at": options.run_at,
                "delay": options.delay,
                "max_attempts": options.max_attempts,
                "on_lost": options.on_lost,
                "payload": item.encoded,
                "key": item.unique_key,
                "concurrency_key": item.concurrency_key,
                "concurrency_limit": options.concurrency_limit if item.concurrency_key is not None else None,
                "on_lost_in_call": options.on_lost_in_call,
            },
        )
        one: list[tuple[Any, ...]] = cursor.fetchall()
        return one
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(items), _ROWS_PER_INSERT):
        chunk = items[start : start + _ROWS_PER_INSERT]
        keys = [item.concurrency_key for item in chunk]
        cursor.execute(
            _INSERT,
            {
                "queue": options.queue,
                "type": options.type,
                "version": options.version,
                "priority": options.priority,
                "run_at": options.run_at,
                "delay": options.delay,
                "max_attempts": options.max_attempts,
                "on_lost": options.on_lost,
                "payloads": [item.encoded for item in chunk],
                "keys": [item.unique_key for item in chunk],
                # NULL when no job has a key: unnest() pads it with NULLs, nothing to send.
                "concurrency_keys": keys if any(key is not None for key in keys) else None,
                "concurrency_limit": options.concurrency_limit,
                "on_lost_in_call": options.on_lost_in_call,
            },
        )
        made = cursor.fetchall()
        if made:
            _, _, available_at, created_at = made[0]
            rows += [(row[0], row[1], available_at, created_at) for row in made]
    return rows


def _unsaved(options: _Options, items: list[_Item]) -> list[Job]:
    """The jobs of a call as model instances that were never written (no id, no dates but
    ``run_at``, as ``available_at``)."""
    when = {"available_at": options.run_at} if options.run_at is not None else {}
    return [
        Job(
            **when,
            queue=options.queue,
            type=options.type,
            version=options.version,
            payload=item.payload,
            status="pending",
            priority=options.priority,
            attempts=0,
            max_attempts=options.max_attempts,
            unique_key=item.unique_key,
            on_lost=options.on_lost,
            concurrency_key=item.concurrency_key,
            concurrency_limit=options.concurrency_limit if item.concurrency_key is not None else None,
            on_lost_in_call=options.on_lost_in_call,
        )
        for item in items
    ]


def _job_maker(alias: str, options: _Options) -> Callable[[_Item, tuple[Any, ...]], Job]:
    """Turn an inserted row into a model instance, from what we sent and what the database computed.

    The fields every job of the call shares are laid out once; each job adds its own.
    """
    shared = {name: _LEFT_TO_DEFAULTS[name] for name in _ATTNAMES}
    shared.update(
        queue=options.queue,
        type=options.type,
        version=options.version,
        status="pending",
        priority=options.priority,
        attempts=0,
        max_attempts=options.max_attempts,
        on_lost=options.on_lost,
        on_lost_in_call=options.on_lost_in_call,
    )
    limit = options.concurrency_limit
    with_init = pre_init.has_listeners(Job) or post_init.has_listeners(Job)

    def make(item: _Item, returned: tuple[Any, ...]) -> Job:
        values = shared.copy()
        (values["id"], values["unique_key"], values["available_at"], values["created_at"]) = returned
        values["payload"] = item.payload
        if item.concurrency_key is not None:
            values["concurrency_key"] = item.concurrency_key
            values["concurrency_limit"] = limit
        if with_init:
            return Job.from_db(alias, _ATTNAMES, [values[name] for name in _ATTNAMES])
        # What Model.from_db makes, without Model.__init__'s walk over every field: with nobody
        # listening to its signals, the instance is the same, for a fifth of the time.
        job = Job.__new__(Job)
        job.__dict__.update(values)
        job._state = ModelState()
        job._state.adding = False
        job._state.db = alias
        return job

    return make


def _fill_from_holders(
    cursor: Any,
    alias: str,
    options: _Options,
    items: list[_Item],
    missing: list[int],
    result: list[Job | None],
) -> list[int]:
    """Point deduplicated items at the active job holding their key; return items to insert again."""
    if not missing:
        return []
    keys = sorted({key for i in missing if (key := items[i].unique_key) is not None})
    cursor.execute(_SELECT_HOLDERS, [options.type, keys])
    holders = {job.unique_key: job for job in (_job_from_row(alias, r) for r in cursor.fetchall())}
    retry: list[int] = []
    for i in missing:
        holder = holders.get(items[i].unique_key)
        if holder is None:
            retry.append(i)
        else:
            result[i] = holder
    return retry


def _job_from_row(alias: str, row: Sequence[Any]) -> Job:
    """A model instance from a raw row, with the fields' database converters applied (jsonb)."""
    connection = connections[alias]
    values = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(_FIELDS, row, strict=True)
    ]
    return Job.from_db(alias, _ATTNAMES, values)
