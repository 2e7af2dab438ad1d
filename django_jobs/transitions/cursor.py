"""A cursor for the hot statements: parameters bound by the server, on Django's connection.

Django's psycopg cursor is a ``ClientCursor``: it renders every parameter into the SQL text in
Python. For a claim or an outcome write that binds a few arrays of a hundred values, that
rendering cost more CPU than everything else the worker does for a no-op job. A plain
``psycopg.Cursor`` sends the arrays separately, in binary, dumped in C.

It runs on the very connection Django manages for the alias, so it sees the same transaction
(``transaction.atomic``, a test's transaction) and the same autocommit mode; psycopg's errors
are turned into Django's (``OperationalError``, ``DataError``…) as with Django's own cursor,
and an error marks the connection as Django does, so a broken one is replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connections


@contextmanager
def bound_cursor(alias: str) -> Iterator[psycopg.Cursor]:
    connection = connections[alias]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            yield cursor


class _QueryKeepingCursor(psycopg.Cursor[Any]):
    """Keeps the statement it ran where Django's query log reads it (``cursor._query``), also
    when psycopg ran it as a prepared statement (``OPTIONS["prepare_threshold"]``): psycopg
    leaves it unset then, and Django would log the statement as ``None``."""

    def _maybe_prepare_gen(self, pgq: Any, *, prepare: bool | None = None, binary: bool | None = None) -> Any:
        self._query = pgq
        return (yield from super()._maybe_prepare_gen(pgq, prepare=prepare, binary=binary))


def django_bound_cursor(alias: str) -> Any:
    """A server-binding cursor wrapped as Django wraps its own: for statements a web request runs.

    Unlike :func:`bound_cursor`, its statements pass through the connection's execute wrappers
    (tracing, ``django.db.connection.execute_wrapper``) and are logged with the request's queries
    under ``DEBUG`` (the debug toolbar, ``CaptureQueriesContext``), as an ORM statement would be.
    """
    connection = connections[alias]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        # The wrapping Django's own connection.cursor() applies (debug log, execute wrappers).
        return connection._prepare_cursor(_QueryKeepingCursor(connection.connection))  # type: ignore[attr-defined]
