"""The search indexes: builds the index of each payload field job types declare searchable
(:mod:`~django_jobs.reads.search_fields`), and drops those no type declares any more.

Run by ``manage.py jobsindexes --create`` (and ``--drop-unused``), never by a worker or a
request: a build reads the whole job table, which may take minutes on millions of rows.

- :func:`build` builds one field's index, ``CREATE INDEX CONCURRENTLY``: reads and writes of the
  job table go on meanwhile (enqueue, claims, outcomes). One left invalid by an interrupted
  build is dropped first, ``DROP INDEX CONCURRENTLY``, and built again: ``IF NOT EXISTS`` alone
  would keep it, unused by the planner and updated by every write;
- :func:`drop` drops one search index, as concurrently.

Options: ``DATABASE`` names the connection. The build lifts the session's
``statement_timeout`` (a project's few seconds would cancel it half-way, leaving an invalid
index) and sets it back afterwards; not on an alias pooled in transaction mode
(``DISABLE_SERVER_SIDE_CURSORS``), where the ``SET``, the build and the ``RESET`` could each run
on another server connection and the lifted limit stay with another client: there the role's
``statement_timeout`` applies (a short one calls for a run over a direct connection).

Caveats: ``CONCURRENTLY`` cannot run inside a transaction (:class:`BuildRefused` says so
before PostgreSQL does); it waits for the transactions that were writing the table when it
started, so a long transaction delays it (never the other way round); it scans the table twice.
``maintenance_work_mem`` of the session makes the build's sort faster. Safe to run in two
places at once: a build in progress elsewhere is left to finish, and ``IF NOT EXISTS`` keeps a
second one from starting.
"""

from __future__ import annotations

import logging
from typing import Literal

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.conf import jobs_settings
from django_jobs.reads.search_fields import IndexState, SearchIndex, create_sql, drop_sql, found_indexes
from django_jobs.transitions.cursor import transaction_pooled

logger = logging.getLogger("django_jobs.search_indexes")

#: What :func:`build` did: built a missing index, rebuilt an invalid one, found it valid, or
#: found another session building it.
Built = Literal["created", "rebuilt", "valid", "building"]


class BuildRefused(RuntimeError):
    """An index cannot be built or dropped from here (inside a transaction, or it did not end
    valid): the message says why."""


def statements(index: SearchIndex) -> list[str]:
    """What :func:`build` runs for ``index`` in its present state (none when it is valid or
    being built): for a person who runs them by hand, or in a migration of their own."""
    if index.state is IndexState.MISSING:
        return [create_sql(index.field)]
    if index.state is IndexState.INVALID:
        return [drop_sql(index.name), create_sql(index.field)]
    return []


def build(index: SearchIndex) -> Built:
    """Build ``index`` unless it is valid or being built elsewhere; rebuild it when invalid.

    Raises ``BuildRefused`` inside a transaction, or when the index is still not valid after
    its build (dropped meanwhile, say). A ``DatabaseError`` of the build itself (a full disk, a
    cancelled statement) leaves the index invalid: the next run rebuilds it.
    """
    if index.state is IndexState.VALID:
        return "valid"
    if index.state is IndexState.BUILDING:
        return "building"
    connection = _outside_transaction()
    logger.info("search index build name=%s state=%s", index.name, index.state.value)
    lift = not transaction_pooled(connection.alias)
    with connection.cursor() as cursor:
        if lift:
            cursor.execute("SET statement_timeout = 0")
        try:
            for statement in statements(index):
                cursor.execute(statement)
        finally:
            if lift:
                cursor.execute("RESET statement_timeout")
    state = found_indexes().get(index.name, IndexState.MISSING)
    if state is not IndexState.VALID:
        raise BuildRefused(f"{index.name} is {state.value} after its build: run the command again")
    return "rebuilt" if index.state is IndexState.INVALID else "created"


def drop(name: str) -> None:
    """Drop the search index ``name`` (nothing when it is gone already). Raises
    ``BuildRefused`` inside a transaction, ``ValueError`` for a name that is not a search
    index's."""
    statement = drop_sql(name)
    connection = _outside_transaction()
    logger.info("search index drop name=%s", name)
    with connection.cursor() as cursor:
        cursor.execute(statement)


def _outside_transaction() -> BaseDatabaseWrapper:
    connection = connections[jobs_settings.DATABASE]
    if connection.in_atomic_block:
        raise BuildRefused(
            "a search index is built and dropped CONCURRENTLY, which PostgreSQL refuses inside a "
            "transaction: call it outside transaction.atomic()"
        )
    return connection
