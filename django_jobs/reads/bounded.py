"""The transaction of the statements whose reads a cap bounds (the dashboard's counts, the
metrics view's gauges): PostgreSQL's JIT compiler off.

Such a statement reads at most a few tens of thousands of index entries, yet the planner prices
it past ``jit_above_cost``: it guesses a hundred rows for a loose index scan (the queues, the
kinds of a type), each with counts it expects to read up to their cap. Compiling the plan then
costs more (about 30 ms, at every execution) than reading what the caps allow. ``SET LOCAL``
keeps the setting to the transaction: a pooled connection goes back as it came.

A page opens one such transaction around all of its reads (:func:`bounded_reads`); each read
joins it (:func:`bounded_cursor`), or opens its own when called alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connections, transaction

from django_jobs.conf import jobs_settings

#: For the rest of the transaction only.
NO_JIT = "SET LOCAL jit = off"

#: The alias whose current transaction has the JIT compiler off, while one has.
_JIT_OFF: ContextVar[str | None] = ContextVar("django_jobs_jit_off", default=None)


@contextmanager
def bounded_reads() -> Iterator[None]:
    """A transaction on the jobs database (the caller's, if it is in one: no savepoint), with the
    JIT compiler off until it ends; inside one already, nothing more."""
    alias = jobs_settings.DATABASE
    if _JIT_OFF.get() == alias and connections[alias].in_atomic_block:
        yield
        return
    with transaction.atomic(using=alias, savepoint=False):
        with connections[alias].cursor() as cursor:
            cursor.execute(NO_JIT)
        token = _JIT_OFF.set(alias)
        try:
            yield
        finally:
            _JIT_OFF.reset(token)


@contextmanager
def bounded_cursor() -> Iterator[Any]:
    """A cursor on the jobs database, inside :func:`bounded_reads`."""
    with bounded_reads(), connections[jobs_settings.DATABASE].cursor() as cursor:
        yield cursor
