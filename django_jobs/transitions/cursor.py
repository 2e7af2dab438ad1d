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

import psycopg
from django.db import connections


@contextmanager
def bound_cursor(alias: str) -> Iterator[psycopg.Cursor]:
    connection = connections[alias]
    with connection.wrap_database_errors:
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            yield cursor
