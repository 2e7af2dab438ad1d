"""The connections a handler runs on: checked before each job, left as the next job expects.

The handler runs on the calling thread's own database connections, in autocommit mode. They
are kept from one job to the next (a refused connection at a crowded database must not be met
once per job), and the one to the jobs database is checked before each job: a connection the
jobs database refuses is an outage, not the handler's failure.

So is one that breaks under the handler (a network cut while the slot idled, a restart). It is
recognised by the connection the handler started on, not by the one found afterwards: on the
way out of an outermost ``atomic`` block whose rollback failed, Django closes the broken
connection and, restoring autocommit, opens a new one, which is sound.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created

from django_jobs.conf import jobs_settings

#: Per executor thread: the connection to the jobs database (psycopg's) that the last job left
#: open and sound (``reset_connections`` says; None if it did not), so the next job need not
#: look again, nor ask Django's connection handler for it.
_thread = threading.local()


def jobs_connection_open() -> bool:
    """Whether this thread has a connection to the jobs database, connecting if it has none.

    No query: a connection the last job left sound is trusted (a broken one fails the handler's
    first query, which the outage check then recognises), so a no-op job costs no round trip.
    """
    kept = getattr(_thread, "kept", None)
    if kept is not None:
        _thread.handler_started_on = kept
        return True
    open_ = _jobs_database_reachable()
    _thread.handler_started_on = connections[jobs_settings.DATABASE].connection if open_ else None
    return open_


def _jobs_database_reachable() -> bool:
    """Whether this thread's connection to the jobs database works (connecting if needed)."""
    connection = connections[jobs_settings.DATABASE]
    try:
        if connection.connection is not None and connection.is_usable():
            return True
        connection.close()
        connection.ensure_connection()
        return True
    except DatabaseError:
        connection.close()
        return False


def jobs_connection_sound() -> bool:
    """Whether this thread's connection to the jobs database survived (it may have been cut,
    or refused when the handler needed it); reconnects it for the next job if it can."""
    connection = connections[jobs_settings.DATABASE]
    started_on = getattr(_thread, "handler_started_on", None)
    if started_on is not None and started_on.broken:
        # Broken under the handler, whether or not Django has replaced it since.
        _jobs_database_reachable()
        return False
    try:
        if connection.connection is not None and connection.is_usable():
            return True
    except DatabaseError:
        pass
    _jobs_database_reachable()
    return False


def reset_connections() -> None:
    """Leave this thread's connections as a new job expects them, keeping those that work.

    Django's per-request ``close_old_connections()`` would close them after every job (the
    default ``CONN_MAX_AGE`` is 0); a worker keeps them instead, and closes only a connection
    that broke, was left in a transaction, or outlived a positive ``CONN_MAX_AGE``.

    The connections are those this thread ever opened: found through Django's connection
    handler at its first job, then named by ``connection_created`` as it opens more. Asking
    the handler for them after every job (``connections.all()``) cost a thread-local lookup per
    configured database, about a tenth of a no-op job's CPU in the worker.
    """
    _thread.handler_started_on = None  # not kept alive past its job
    opened: dict[str, Any] | None = getattr(_thread, "opened", None)
    if opened is None:
        opened = _thread.opened = {c.alias: c for c in connections.all(initialized_only=True)}
    kept = None
    jobs_alias = jobs_settings.DATABASE
    for alias, connection in list(opened.items()):
        if connection.connection is None:
            continue  # closed, or never opened: nothing to check
        if not _keep(connection):
            del opened[alias]  # closed: named again when it, or the wrapper after it, opens
            continue
        if alias == jobs_alias:
            kept = connection.connection
    _thread.kept = kept


def jobs_wrapper() -> Any:
    """This thread's Django connection (the wrapper) to the jobs database: the one its jobs
    opened, as ``connection_created`` named it, without asking Django's connection handler
    (a thread-local lookup at every call); asked when this thread has run no job yet."""
    opened = getattr(_thread, "opened", None)
    alias = jobs_settings.DATABASE
    wrapper = None if opened is None else opened.get(alias)
    return connections[alias] if wrapper is None else wrapper


def _opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: a connection this thread opened is one to check after its jobs."""
    opened = getattr(_thread, "opened", None)
    if opened is not None:
        opened[connection.alias] = connection


connection_created.connect(_opened, dispatch_uid="django_jobs.handler_connections.opened")


def _keep(connection: Any) -> bool:
    """Close ``connection`` if it is spoilt; return whether it stays open."""
    # ``autocommit`` as get_autocommit() reads it, without its check for an event loop and for
    # a connection: the caller looks at open connections only.
    if connection.in_atomic_block or connection.autocommit != connection.settings_dict["AUTOCOMMIT"]:
        # A handler left a transaction open (an atomic block entered and never exited):
        # closing the connection rolls it back; the next job gets a fresh wrapper.
        with contextlib.suppress(Exception):
            connection.connection.close()
        del connections[connection.alias]
        return False
    if connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
            return False
        connection.errors_occurred = False
    max_age = connection.settings_dict.get("CONN_MAX_AGE") or 0
    if max_age and connection.close_at is not None and time.monotonic() >= connection.close_at:
        connection.close()
        return False
    return True
