"""The ``Job`` instances an enqueue call returns: built from what the call sent and the few
values the INSERT returned (id, key, due and creation times), not read back from the table.

``django_jobs.enqueueing`` writes the rows; this turns them into model instances the way
``Model.from_db`` would, for a fraction of its cost (a bulk enqueue makes thousands).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import NOT_PROVIDED, Value
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from django_jobs.enqueue_options import Item, Options
from django_jobs.models import Job
from django_jobs.transitions import enqueue as enqueue_sql

_FIELDS = Job._meta.concrete_fields
#: The job table's columns, in the model's order (a holder's row is read with them).
COLUMNS: list[str] = [str(f.column) for f in _FIELDS]
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

#: What ``transitions.enqueue.insert`` returns for a job: id, unique key, due and creation
#: times (``timestamptz`` loaded in binary: aware, in the connection's time zone).
Returned = tuple[Any, ...]


def _shared_fields(options: Options) -> dict[str, Any]:
    """The fields every new job of a call has alike: the call's options, pending, no attempt yet."""
    return {
        "queue": options.queue,
        "type": options.type,
        "version": options.version,
        "status": "pending",
        "priority": options.priority,
        "attempts": 0,
        "max_attempts": options.max_attempts,
        "on_lost": options.on_lost,
        "on_lost_in_call": options.on_lost_in_call,
        # As stored: the column is jsonb, the option its JSON text.
        "trace_context": None if options.trace_context is None else json.loads(options.trace_context),
    }


def job_maker(alias: str, options: Options) -> Callable[[Item, Returned], Job]:
    """Turn an inserted row into a model instance, from what we sent and what the database computed.

    The fields every job of the call shares are laid out once; each job adds its own.
    """
    shared = dict(_LEFT_TO_DEFAULTS)  # in the order of _ATTNAMES
    shared.update(_shared_fields(options))
    if options.debounce_key is not None:
        shared["debounce_key"] = options.debounce_key
    limit = options.concurrency_limit
    with_init = pre_init.has_listeners(Job) or post_init.has_listeners(Job)
    # Django's own loader gives naive datetimes in the connection's time zone without USE_TZ.
    naive = not settings.USE_TZ

    def make(item: Item, returned: Returned) -> Job:
        values = shared.copy()
        job_id, values["unique_key"], available_at, created_at = returned
        values["id"] = job_id
        # As the insert's trigger set it: created_at is the statement's now().
        values["ready"] = available_at <= created_at
        if naive:
            available_at, created_at = available_at.replace(tzinfo=None), created_at.replace(tzinfo=None)
        values["available_at"] = available_at
        values["created_at"] = created_at
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

    if options.controlled:
        return _with_deadline(make, naive)
    return make


def _with_deadline(make: Callable[[Item, Returned], Job], naive: bool) -> Callable[[Item, Returned], Job]:
    """``make`` for the rows of a controlled INSERT, which return the start-by deadline fifth."""

    def make_controlled(item: Item, returned: Returned) -> Job:
        job = make(item, returned[:4])
        start_by = returned[4]
        job.start_by = start_by.replace(tzinfo=None) if naive and start_by is not None else start_by
        return job

    return make_controlled


def job_from_row(alias: str, row: Sequence[Any]) -> Job:
    """A model instance from a whole row (``COLUMNS``) as Django's cursor loads it, with the
    fields' database converters applied (jsonb)."""
    connection = connections[alias]
    values = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(_FIELDS, row, strict=True)
    ]
    return Job.from_db(alias, _ATTNAMES, values)


def unsaved_jobs(options: Options, items: list[Item]) -> list[Job]:
    """The jobs of a call as model instances that were never written (no id, no dates but
    ``run_at``, as ``available_at``)."""
    when: dict[str, Any] = {"available_at": options.run_at} if options.run_at is not None else {}
    if options.start_by is not None:
        when["start_by"] = options.start_by
    if options.debounce_key is not None:
        when["debounce_key"] = options.debounce_key
    shared = _shared_fields(options)
    return [
        Job(
            **when,
            **shared,
            payload=item.payload,
            unique_key=item.unique_key,
            concurrency_key=item.concurrency_key,
            concurrency_limit=options.concurrency_limit if item.concurrency_key is not None else None,
        )
        for item in items
    ]


def fill_from_holders(
    alias: str,
    options: Options,
    items: list[Item],
    missing: list[int],
    result: list[Job | None],
) -> list[int]:
    """Point deduplicated items at the active job holding their key; return items to insert again."""
    if not missing:
        return []
    keys = sorted({key for i in missing if (key := items[i].unique_key) is not None})
    # Django's own cursor, in the same transaction: whole rows, loaded as the ORM loads them.
    with connections[alias].cursor() as cursor:
        rows = enqueue_sql.holders(cursor, COLUMNS, options.type, keys)
    holders = {job.unique_key: job for job in (job_from_row(alias, row) for row in rows)}
    retry: list[int] = []
    for i in missing:
        holder = holders.get(items[i].unique_key)
        if holder is None:
            retry.append(i)
        else:
            result[i] = holder
    return retry
