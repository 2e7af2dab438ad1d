"""Idempotent side effects: a job may run more than once, its business effect happens once.

Three tools, from the most to the least local:

- :func:`once` — for an effect in *this* database: the effect's key is inserted into
  ``ProcessedEffect`` in the same transaction as the effect, so both commit or roll back
  together, and a second execution finds the key and skips the effect.
- ``ctx.idempotency_key(*parts, anchor=...)`` — for an external call: a key for the provider's
  ``Idempotency-Key`` header (the provider then deduplicates). Anchored on the business
  operation (``anchor=f"order:{order_id}"``), it is the same on every attempt and for every
  job of that operation.
- :func:`compare_and_set` — for state machines in your own models: move a row only from the
  state you expect; zero rows moved means someone (an earlier execution) already did it.

Why recording a key before or after a *non-transactional* external call is not enough: record
it before the call, and a crash after recording skips a call that never happened; record it
after, and a crash between the call and the record repeats the call. No local table can make
an external effect exactly-once: the external side has to deduplicate (an idempotency key), or
the job has to ask it what happened (``reconcile``). See docs/idempotency.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, models, transaction

from django_jobs.conf import jobs_settings
from django_jobs.transitions.effects import record_effect

MAX_KEY_LENGTH = 300


@contextmanager
def once(key: str, *, job_id: int | None = None, using: str | None = None) -> Iterator[bool]:
    """Run a database-local effect at most once per ``key``.

    ::

        with once(f"invoice:order:{order_id}") as first_time:
            if first_time:
                Invoice.objects.create(order_id=order_id, ...)

    Opens a transaction (a savepoint inside one) on ``using`` (default: the jobs database; it
    must be the database the effect writes to) and records ``key``. Yields True when this
    is the first time: do the effect inside the block. Yields False when the key was already
    recorded: skip it. If the block raises, the effect and the key roll back together. A
    concurrent execution with the same key waits for this transaction and then sees the key.
    """
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"an effect key must be 1 to {MAX_KEY_LENGTH} characters")
    alias = using or jobs_settings.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        yield record_effect(cursor, key, job_id)


def compare_and_set(queryset: models.QuerySet[Any], field: str, expected: Any, new: Any, **also: Any) -> bool:
    """Move the rows of ``queryset`` whose ``field`` equals ``expected`` to ``new``, atomically.

    ::

        if compare_and_set(Order.objects.filter(pk=order_id), "status", "waiting_payment", "paid",
                           paid_at=Now()):
            ...  # this execution made the transition: do what follows from it
        # False: the order was not waiting for payment (already paid by an earlier execution)

    One ``UPDATE … WHERE field = expected``: no read-modify-write race. Returns whether at least
    one row moved.
    """
    return queryset.filter(**{field: expected}).update(**{field: new}, **also) > 0
