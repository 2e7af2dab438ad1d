"""A cursor for the hot statements: parameters bound by the server, on Django's connection.

Django's psycopg cursor is a ``ClientCursor``: it renders every parameter into the SQL text in
Python. For a claim or an outcome write that binds a few arrays of a hundred values, that
rendering cost more CPU than everything else the worker does for a no-op job. A plain
``psycopg.Cursor`` sends the arrays separately, in binary, dumped in C.

It runs on the very connection Django manages for the alias, so it sees the same transaction
(``transaction.atomic``, a test's transaction) and the same autocommit mode; psycopg's errors
are turned into Django's (``OperationalError``, ``DataError``…) as with Django's own cursor,
and an error marks the connection as Django does, so a broken one is replaced.

The arrays of the statements that run for every job (enqueue_many's payloads, the outcome and
heartbeat writes) are bound in binary (``%b``): psycopg's text format for a list builds the
array literal in Python, quoting and escaping each element (30 µs a job for a payload of two
fields, 7 µs a row for a UUID), where the binary format packs it in C in about 1 µs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections

from django_jobs.conf import jobs_settings


@contextmanager
def bound_cursor(alias: str, *, prepared: bool = False) -> Iterator[psycopg.Cursor]:
    """A server-binding cursor on ``alias``'s connection. ``prepared``: its statements run as
    prepared statements where :func:`prepares_statements` allows it (for the statements a worker
    runs at every batch, whose planning would otherwise be a fifth of their cost)."""
    connection = connections[alias]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        cursor: psycopg.Cursor = (
            _QueryKeepingCursor(connection.connection, prepare=prepares_statements(alias))
            if prepared
            else psycopg.Cursor(connection.connection)
        )
        with cursor:
            if _wrapped_openings and connection.execute_wrappers:
                # The wrapping of Django's own cursor: its execute wrappers see the statement.
                yield connection._prepare_cursor(cursor)  # type: ignore[attr-defined]
            else:
                yield cursor


#: How many blocks ask the hot statements to pass through Django's execute wrappers
#: (``django_jobs.testing.capture_statements``); while none does, they bypass them, as their
#: wrapping costs a call per statement that the hot path does not pay.
_wrapped_openings = 0
_wrapped_lock = threading.Lock()


@contextmanager
def through_execute_wrappers() -> Iterator[None]:
    """While the block runs, the statements of :func:`bound_cursor` (the claim, heartbeats,
    outcome writes) pass through the execute wrappers of their connection, in every thread,
    as an ORM statement does (``django.db.connection.execute_wrapper``)."""
    global _wrapped_openings
    with _wrapped_lock:
        _wrapped_openings += 1
    try:
        yield
    finally:
        with _wrapped_lock:
            _wrapped_openings -= 1


#: A prepare_threshold no statement reaches by being run: only those asked for are prepared.
_NEVER_BY_COUNT = 2**62


class _QueryKeepingCursor(psycopg.Cursor[Any]):
    """Keeps the statement it ran where Django's query log reads it (``cursor._query``), also
    when psycopg ran it as a prepared statement: psycopg leaves it unset then, and Django would
    log the statement as ``None``.

    ``prepare`` is psycopg's ``execute(prepare=…)`` for every statement of this cursor (Django's
    ``execute()`` has no such argument): True prepares them, False never, None leaves it to the
    connection's ``prepare_threshold``. psycopg prepares nothing on a connection whose threshold
    is None (Django's default), whatever ``execute()`` asks: for a statement to prepare, the
    threshold is lifted while that statement runs, so the connection's other statements stay
    unprepared, and the statements prepared stay known to psycopg (a rollback deallocates them).
    """

    def __init__(self, connection: psycopg.Connection[Any], *, prepare: bool | None = None) -> None:
        super().__init__(connection)
        self._prepare_statements = prepare
        self.in_use = False  # a kept cursor's, while a call runs statements on it
        self.zone: str | None = None  # a kept cursor's: the session's TimeZone when made

    @property
    def prepares(self) -> bool | None:
        return self._prepare_statements

    def _maybe_prepare_gen(self, pgq: Any, *, prepare: bool | None = None, binary: bool | None = None) -> Any:
        self._query = pgq
        if prepare is None:
            prepare = self._prepare_statements
        manager = self._conn._prepared
        if not prepare or manager.prepare_threshold is not None:
            return (yield from super()._maybe_prepare_gen(pgq, prepare=prepare, binary=binary))
        manager.prepare_threshold = _NEVER_BY_COUNT
        try:
            return (yield from super()._maybe_prepare_gen(pgq, prepare=True, binary=binary))
        finally:
            manager.prepare_threshold = None


def prepares_statements(alias: str) -> bool | None:
    """Whether django_jobs prepares its own statements on ``alias``'s connection
    (``PREPARED_STATEMENTS``): True, False, or None for psycopg's rule (``prepare_threshold``).

    By default they are, unless the alias looks pooled in transaction mode: there a statement
    prepared on one server connection is missing on the next, or another client's statement of
    the same name runs instead. Django's setting for transaction pooling is
    ``DISABLE_SERVER_SIDE_CURSORS``; an explicit ``OPTIONS["prepare_threshold"]`` is the
    project's own choice for the connection, and psycopg applies it.
    """
    chosen: bool | None = jobs_settings.PREPARED_STATEMENTS
    if chosen is not None:
        return chosen
    if transaction_pooled(alias):
        return False
    if "prepare_threshold" in (connections[alias].settings_dict.get("OPTIONS") or {}):
        return None
    return True


def transaction_pooled(alias: str) -> bool:
    """Whether ``alias`` is declared to reach PostgreSQL through a pooler in transaction mode:
    ``DISABLE_SERVER_SIDE_CURSORS``, the setting Django asks for there (``runjobs`` and
    ``reapjobs`` set it in their own process for a pooler they find: ``runtime.pooler``).

    On such an alias nothing of django_jobs may live longer than a transaction: no prepared
    statement (above), no session-level setting (``runtime.connectivity``), no ``LISTEN``
    (``runtime.listener``): the next transaction runs on another server connection, and the
    one this left behind is lent to other clients with whatever was left on it.
    """
    return bool(connections[alias].settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


@contextmanager
def django_bound_cursor(
    alias: str, *, prepare: bool | None = None, binary_results: bool = False, kept: bool = False
) -> Iterator[Any]:
    """A server-binding cursor wrapped as Django wraps its own: for statements a web request runs.

    Unlike :func:`bound_cursor`, its statements pass through the connection's execute wrappers
    (tracing, ``django.db.connection.execute_wrapper``) and are logged with the request's queries
    under ``DEBUG`` (the debug toolbar, ``CaptureQueriesContext``), as an ORM statement would be.
    ``prepare``: as :class:`_QueryKeepingCursor`'s; the connection itself is left as it is.

    ``binary_results``: rows come back in binary, loaded by psycopg's C loaders rather than the
    text loaders Django registers (its ``timestamptz`` loader is Python, a third of a lone
    INSERT's client time for two timestamps). Only for statements that return no ``json`` or
    ``jsonb`` (Django loads those as text) and whose caller takes timestamps as psycopg gives
    them: aware, in the connection's time zone (Django's are naive without ``USE_TZ``).

    ``kept``: the psycopg cursor stays open on the connection for the next call, instead of a new
    one each time, which builds its parameter dumpers and row loaders again at its first
    statement (~50 µs of a lone ``enqueue()``'s client time). For statements of a few rows: it
    holds its last result until the next. A call made while the kept cursor is in use (an execute
    wrapper that enqueues) gets a cursor of its own.
    """
    connection = connections[alias]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        cursor = _kept(connection, prepare, binary_results) if kept else None
        reused = cursor is not None
        if cursor is None:
            cursor = _QueryKeepingCursor(connection.connection, prepare=prepare)
            if binary_results:
                cursor.format = psycopg.pq.Format.BINARY
    # The wrapping Django's own connection.cursor() applies (debug log, execute wrappers).
    wrapped = connection._prepare_cursor(cursor)  # type: ignore[attr-defined]
    try:
        yield wrapped
    finally:
        if reused:
            cursor.in_use = False
        else:
            with connection.wrap_database_errors:
                cursor.close()


#: Where a connection's kept cursor waits for the next call (an attribute of Django's wrapper).
_KEPT = "_django_jobs_kept_cursor"


def _kept(connection: Any, prepare: bool | None, binary_results: bool) -> _QueryKeepingCursor | None:
    """The connection's kept cursor, marked in use; None while another call uses it."""
    kept: _QueryKeepingCursor | None = getattr(connection, _KEPT, None)
    if kept is not None and kept.in_use:
        return None
    binary = psycopg.pq.Format.BINARY if binary_results else psycopg.pq.Format.TEXT
    # Its loaders read the session's time zone once: a SET TIME ZONE since (Django's, when
    # TIME_ZONE or USE_TZ change) calls for a new cursor, as does a new connection.
    zone = connection.connection.info.parameter_status("TimeZone")
    if (
        kept is None
        or kept.closed
        or kept.connection is not connection.connection
        or kept.zone != zone
        or kept.prepares is not prepare
        or kept.format != binary
    ):
        kept = _QueryKeepingCursor(connection.connection, prepare=prepare)
        kept.format = binary
        kept.zone = zone
        setattr(connection, _KEPT, kept)
    kept.in_use = True
    return kept


def seconds(values: Iterable[float | None]) -> list[float | None]:
    """``values`` (durations, None for NULL) for a ``%b::float8[]`` parameter: psycopg refuses
    to dump a list that mixes ints and floats in binary, and a delay or a lease may be an int."""
    return [None if value is None else float(value) for value in values]
