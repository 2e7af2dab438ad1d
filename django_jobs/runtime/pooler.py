"""Whether a database alias reaches PostgreSQL through a connection pooler in transaction mode.

Behind such a pooler (PgBouncer's ``pool_mode = transaction``) a client is lent a server
connection for one transaction at a time: whatever lives longer than a transaction — a
prepared statement, a session's ``SET``, a ``LISTEN`` — stays on a server connection that the
next client gets, and is missing from the one this client gets next. Projects declare it with
``DISABLE_SERVER_SIDE_CURSORS`` (``transitions.cursor.transaction_pooled``); this module finds
it where it can, for the system checks (``check --database``, ``migrate``), for ``runjobs`` and
``reapjobs``, which treat a pooler they find as declared (``management.pooling``), and for the
listener, which then does not LISTEN.

How it tells, with two or three round trips and one extra connection:

1. **A pooler answers.** The process id PostgreSQL reports at login (libpq's
   ``backend_pid``, from the ``BackendKeyData`` message) is the server process's own on a
   direct connection; a pooler sends a key of its own instead, so ``SELECT pg_backend_pid()``
   names another process.
2. **It pools transactions.** A second client connects and asks for its server's process: in
   session mode the first client keeps its server for its whole session, so the second never
   gets it; in transaction mode the first one's server was returned to the pool at the end of
   its statement, and a pool that reuses the last returned connection first (PgBouncer's
   default) lends it to the second at once. And a first client whose next statement runs on
   another server process is lent them per transaction as well.

Finding the mode is one-sided: seeing a server connection change hands proves transaction
mode, while a busy pool may lend another one at that moment, and the pooler then passes for a
session pool (``Pooling.POOLER``). The listener therefore also checks, at each keepalive, that
its session still runs on the server process that took its ``LISTEN``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.transitions.cursor import transaction_pooled


class Pooling(enum.Enum):
    """What answers at a database alias's address."""

    #: PostgreSQL itself.
    DIRECT = "direct"
    #: A pooler that kept this client's server connection for its session, as far as seen.
    POOLER = "pooler"
    #: A pooler that lends server connections one transaction at a time.
    TRANSACTIONS = "transaction pooler"


def connection_params(alias: str) -> dict[str, Any]:
    """The alias's connection parameters, as Django would connect, for a plain psycopg
    connection of django_jobs' own: no statement of it is ever prepared."""
    params: dict[str, Any] = connections[alias].get_connection_params()
    # Django's cursor classes and adapters are for its own connections.
    for key in ("cursor_factory", "context", "server_side_binding"):
        params.pop(key, None)
    params["prepare_threshold"] = None
    return params


def server_pid(conn: psycopg.Connection[Any]) -> int:
    """The process id of the PostgreSQL server process running this statement."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None  # one row, always: a SELECT without FROM
    return int(row[0])


def pooling_of(conn: psycopg.Connection[Any], params: dict[str, Any]) -> Pooling:
    """What ``conn`` (open, in autocommit, in no transaction) goes through; ``params`` opens a
    second client of the same pool. Raises ``psycopg.Error`` when the database does not answer."""
    first = server_pid(conn)
    if first == conn.info.backend_pid:
        return Pooling.DIRECT
    with psycopg.connect(**params, autocommit=True) as other:
        lent = server_pid(other) == first
    if lent or server_pid(conn) != first:
        return Pooling.TRANSACTIONS
    return Pooling.POOLER


def detect(alias: str) -> Pooling:
    """What ``alias`` reaches PostgreSQL through. Raises ``psycopg.Error`` when it does not
    answer."""
    params = connection_params(alias)
    with psycopg.connect(**params, autocommit=True) as conn:
        return pooling_of(conn, params)


def database_identity(alias: str) -> tuple[int, int]:
    """The PostgreSQL cluster (its system identifier) and the database (its oid) ``alias``
    reaches, whatever pooler is in between: two aliases that agree reach the same database.
    A streaming replica shares its primary's identifier, but refuses ``LISTEN``."""
    with psycopg.connect(**connection_params(alias), autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT system_identifier FROM pg_control_system()),"
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    assert row is not None  # one row, always: a SELECT without FROM
    return int(row[0]), int(row[1])


@dataclass(frozen=True)
class Survey:
    """What the jobs database's aliases go through, for the checks and the commands' start."""

    alias: str
    pooling: Pooling
    #: The alias of the workers' LISTEN connection (``LISTEN_DATABASE``, else ``alias``).
    listen_alias: str
    listen_pooling: Pooling
    #: Whether ``LISTEN_DATABASE`` reaches the jobs database (None: it is not set).
    listen_same_database: bool | None


def survey() -> Survey:
    """Look at the jobs database's alias and the listening one. Raises ``psycopg.Error`` when
    one does not answer."""
    alias = jobs_settings.DATABASE
    listen_alias = jobs_settings.LISTEN_DATABASE or alias
    pooling = detect(alias)
    if listen_alias == alias:
        return Survey(alias, pooling, alias, pooling, None)
    same = database_identity(listen_alias) == database_identity(alias)
    return Survey(alias, pooling, listen_alias, detect(listen_alias), same)


def treat_as_pooled(alias: str) -> None:
    """Declare ``alias`` pooled in transaction mode for this process (``runjobs`` and
    ``reapjobs`` on a pooler they found, a process-pool child as its worker says): from now on
    no statement of it is prepared, no session setting is made and Django uses no server-side
    cursor, as if the project had set ``DISABLE_SERVER_SIDE_CURSORS``."""
    # Every thread's connection wrapper reads this very dict.
    connections.settings[alias]["DISABLE_SERVER_SIDE_CURSORS"] = True


def pooled_aliases() -> tuple[str, ...]:
    """The aliases this process treats as pooled in transaction mode, declared or found (what a
    process-pool child must be told: it reads the settings afresh)."""
    return tuple(alias for alias in connections if transaction_pooled(alias))
