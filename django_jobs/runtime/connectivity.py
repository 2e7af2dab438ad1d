"""How a worker's connections notice a dead peer within seconds, not the kernel's minutes.

A network path that goes away without a word (a cut link, a crashed router, a host that lost
power) leaves every open TCP connection waiting. Without the options below, a connection that
sent a statement waits on the kernel's retransmission back-off (about 15 minutes before Linux
gives up; after a two-minute cut, the next retransmission may come a minute and a half after
the link is back), and an idle one is never told. A worker whose heartbeat connection is stuck
that way keeps starting jobs whose leases it cannot extend: other workers take them back, and
they run twice.

So every connection a worker process opens to PostgreSQL gets, unless its ``OPTIONS`` in
``DATABASES`` say otherwise (the user's value wins):

- libpq's TCP keepalives (``keepalives_idle`` / ``keepalives_interval`` / ``keepalives_count``):
  a silent peer is probed and given up after idle + interval × count seconds;
- ``tcp_user_timeout``: a connection whose data stays unacknowledged that long is closed, so a
  statement sent into a cut fails within seconds, and the worker reconnects;
- ``connect_timeout``: a connection attempt into a cut gives up instead of waiting for the
  kernel's SYN retries (about two minutes).

These apply to the handlers' connections in that process too: they only shorten how long a
dead peer goes unnoticed, which is what a handler wants as well. The jobs database's connections
also ask for a server that takes writes (libpq's ``target_session_attrs=read-write``): during a
failover, the address may answer as a standby before it is promoted.

The worker's own statements (claim, heartbeat, outcomes, reaper, scheduler) run on connections
of their own threads, which also get a ``statement_timeout``: one held up by a lock or an
overloaded server fails and is retried, instead of holding the worker's leases hostage. The
handlers' connections do not: a handler's statements are the application's business, bounded
by the job's ``timeout`` and whatever the application sets. The writes a handler asks of the
worker (``ctx.heartbeat()``, ``progress``, checkpoints, ``external_call`` marks) run on the
heartbeat's thread, bounded; an effect recorded in the handler's own transaction is not.

The settings (``CONNECT_TIMEOUT``, ``TCP_KEEPALIVES_*``, ``TCP_USER_TIMEOUT``,
``STATEMENT_TIMEOUT``) are documented in docs/configuration.md; ``None`` leaves one to libpq's
and the kernel's defaults. On an alias pooled in transaction mode (``DISABLE_SERVER_SIDE_CURSORS``,
see ``transitions.cursor.transaction_pooled``) neither the timeout nor ``jit`` is set: a session's
setting would stay on the server connection that ran it, which the pooler lends to other clients
next (a web request would inherit the worker's 30 s limit), while the worker's next transaction
runs on another one without it. Set them on the workers' role there (docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

from django_jobs.conf import jobs_settings
from django_jobs.transitions.cursor import transaction_pooled

#: Per thread: whether it runs the worker's own statements (see ``run_worker_statements``).
_thread = threading.local()


def connection_options() -> dict[str, int]:
    """The libpq parameters every worker connection gets, from the settings (None: omitted)."""
    seconds = {
        "connect_timeout": jobs_settings.CONNECT_TIMEOUT,
        "keepalives_idle": jobs_settings.TCP_KEEPALIVES_IDLE,
        "keepalives_interval": jobs_settings.TCP_KEEPALIVES_INTERVAL,
    }
    # libpq takes whole seconds here: round up, so that a short setting never means "off" (0).
    options = {name: max(1, math.ceil(value)) for name, value in seconds.items() if value is not None}
    if jobs_settings.TCP_KEEPALIVES_COUNT is not None:
        options["keepalives_count"] = jobs_settings.TCP_KEEPALIVES_COUNT
    if "keepalives_idle" in options or "keepalives_count" in options:
        options["keepalives"] = 1
    if jobs_settings.TCP_USER_TIMEOUT is not None:
        options["tcp_user_timeout"] = max(1, round(1000 * jobs_settings.TCP_USER_TIMEOUT))  # milliseconds
    return options


def apply_connection_options() -> None:
    """Give every PostgreSQL database of this process the worker's connection options, where
    its ``OPTIONS`` do not set them already. Connections opened from now on carry them.

    Called by the commands that run workers and reapers (and by process-pool children): a web
    process that merely enqueues keeps its settings as they are.
    """
    options = connection_options()
    for alias in connections:
        settings_dict = connections.settings[alias]
        if not settings_dict.get("ENGINE", "").endswith("postgresql"):
            continue
        own = settings_dict.setdefault("OPTIONS", {})
        for name, value in options.items():
            own.setdefault(name, value)
        if alias in (jobs_settings.DATABASE, jobs_settings.LISTEN_DATABASE):
            # A standby at the jobs database's address (a failover under way, before its
            # promotion) is refused as a connection, which the worker waits out like an outage;
            # connected to it, every write would fail with an error that stops the worker (and
            # a standby refuses LISTEN). Only these aliases: a handler may read from a replica
            # on purpose.
            own.setdefault("target_session_attrs", "read-write")


#: Set on a Django connection wrapper: whether its current connection got the worker's settings.
_OWN = "django_jobs_worker_statements"


def run_worker_statements() -> None:
    """Mark this thread, one of the worker's own, for good: the connections it opens from now
    on get ``STATEMENT_TIMEOUT``. A handler's thread is never marked."""
    _thread.worker_statements = True


@contextlib.contextmanager
def worker_statements() -> Iterator[None]:
    """Mark this thread for a while (a worker run on a thread that is not its own: a test's,
    an embedding program's, or ``runjobs``' main thread). A connection the thread has open
    already (its start-up read the database) gets the worker's settings now. On the way out the
    thread is as it was: a connection that got them is closed, so that its next one has none."""
    before = runs_worker_statements()
    _thread.worker_statements = True
    if not before:
        for connection in connections.all(initialized_only=True):
            if connection.connection is not None and not connection.in_atomic_block:
                _bound_worker_statements(None, connection)
    try:
        yield
    finally:
        _thread.worker_statements = before
        if not before:
            for connection in connections.all(initialized_only=True):
                if getattr(connection, _OWN, False) and not connection.in_atomic_block:
                    connection.close()


def runs_worker_statements() -> bool:
    return bool(getattr(_thread, "worker_statements", False))


def _bound_worker_statements(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: a connection opened by a worker's own thread gets the timeout,
    and no JIT compilation.

    The worker's statements are short, and each plans in a millisecond or two; on a table of
    millions PostgreSQL estimates a claim costly enough to compile it (``jit_above_cost``),
    which takes a hundred milliseconds a claim and saves nothing.
    """
    timeout = jobs_settings.STATEMENT_TIMEOUT
    own = (
        connection.vendor == "postgresql"
        and runs_worker_statements()
        and not transaction_pooled(connection.alias)
    )
    setattr(connection, _OWN, own)
    if not own:
        return
    # Raw, on the new connection: Django's cursor would log it with the queries of a request.
    if timeout is not None:
        connection.connection.execute(
            "SELECT set_config('jit', 'off', false), set_config('statement_timeout', %s, false)",
            [f"{max(1, round(1000 * timeout))}ms"],
        )
    else:  # the server's or the role's statement_timeout stays
        connection.connection.execute("SELECT set_config('jit', 'off', false)")
    if not connection.get_autocommit():
        connection.connection.commit()


def install() -> None:
    """Listen for new connections (apps.ready): idempotent."""
    connection_created.connect(_bound_worker_statements, dispatch_uid="django_jobs.connectivity")
