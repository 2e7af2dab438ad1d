"""What holds the vacuum horizon of the jobs database back: the transactions, prepared
transactions, replication slots and standbys whose snapshot is older than the dead job rows.

While one of them lasts, vacuum can remove no row version that died after its snapshot was
taken: every claim and every outcome leaves a dead version of the job row (and dead entries in
its indexes) that stays until the holder ends. One statement over the server's views (no table
of the product is read); a role without ``pg_read_all_stats`` still sees every session's pid,
role, application and snapshot age, but not its state, its start or its query, and
:attr:`Holder.hidden` says so.

Only what holds back the job table is read: sessions and prepared transactions of this database
(another database's snapshot does not hold its tables back), every replication slot, and the
standbys whose ``hot_standby_feedback`` reaches the primary through a WAL sender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.sanitize import sanitize

#: Longest query excerpt shown: a statement's head says what it is.
QUERY_CHARS = 200
#: Longest application name shown (PostgreSQL keeps 63 bytes anyway).
NAME_CHARS = 100

#: Every holder of the horizon but the reading session, with its age in transactions (the
#: greater of its own xid's and its snapshot's: a session that wrote holds with its xid even
#: between two statements of READ COMMITTED, which leave no snapshot) and, where the server
#: tells it, since when. ``xact_start`` is NULL for another role's session unless the reader
#: has ``pg_read_all_stats``; so is ``backend_type``, which is why a NULL one is kept (the WAL
#: senders are read from pg_stat_replication instead). A slot's ``catalog_xmin`` holds back the
#: system catalogs only, its ``xmin`` every table.
HOLDERS = """
SELECT 'session', pid::text, usename, application_name, state, host(client_addr),
       EXTRACT(EPOCH FROM now() - xact_start), greatest(age(backend_xid), age(backend_xmin)),
       query, xact_start IS NULL
FROM pg_stat_activity
WHERE datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND (backend_type IS NULL OR backend_type = 'client backend')
UNION ALL
SELECT 'prepared', gid, owner, NULL, NULL, NULL,
       EXTRACT(EPOCH FROM now() - prepared), age(transaction), NULL, false
FROM pg_prepared_xacts
WHERE database = current_database()
UNION ALL
SELECT CASE WHEN xmin IS NULL THEN 'slot_catalog' ELSE 'slot' END, slot_name, NULL, slot_type,
       CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL,
       NULL, coalesce(age(xmin), age(catalog_xmin)), NULL, false
FROM pg_replication_slots
WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
UNION ALL
SELECT 'standby', pid::text, usename, application_name, state, host(client_addr),
       NULL, age(backend_xmin), NULL, false
FROM pg_stat_replication
WHERE backend_xmin IS NOT NULL
"""


@dataclass(frozen=True)
class Holder:
    """One thing whose snapshot holds the horizon back."""

    #: ``session``, ``prepared`` (a prepared transaction), ``slot`` (a replication slot's xmin:
    #: every table), ``slot_catalog`` (its catalog_xmin only: the system catalogs) or
    #: ``standby`` (a WAL sender's hot_standby_feedback).
    kind: str
    #: The pid of a session or WAL sender, the gid of a prepared transaction, a slot's name.
    name: str
    user: str | None
    #: application_name of a session or standby; physical / logical for a slot.
    application: str | None
    #: A session's state (``idle in transaction``, ``active``…); active / inactive for a slot.
    state: str | None
    client: str | None
    #: How long its transaction has been open (a prepared one: since it was prepared); None
    #: where the server does not say (slots, standbys, a session hidden from this role).
    held_seconds: float | None
    #: How many transactions old the oldest snapshot or xid it holds is.
    xid_age: int
    #: The head of its current (or last) statement, secrets redacted, on one line; None for
    #: what runs no statement here or is hidden.
    query: str | None
    #: The session belongs to another role and this one lacks ``pg_read_all_stats``: its state,
    #: start and query are not readable.
    hidden: bool = False

    @property
    def inactive_slot(self) -> bool:
        """A slot no consumer reads: nothing will ever advance its xmin."""
        return self.kind in {"slot", "slot_catalog"} and self.state == "inactive"


def holders(older_than: float, xids_over: int, limit: int = 5) -> list[Holder]:
    """What holds the horizon back beyond an ordinary short transaction, the oldest snapshot
    first, at most ``limit``: what has been open more than ``older_than`` seconds, what cannot
    say since when and is more than ``xids_over`` transactions old, and every inactive slot."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        found = read_holders(cursor)
    held = [h for h in found if _holds(h, older_than, xids_over)]
    return sorted(held, key=lambda h: (-h.xid_age, h.kind, h.name))[:limit]


def read_holders(cursor: Any) -> list[Holder]:
    """Every holder of the horizon of the database ``cursor`` is connected to, unfiltered."""
    cursor.execute(HOLDERS)
    return [_holder(*row) for row in cursor.fetchall()]


def _holds(holder: Holder, older_than: float, xids_over: int) -> bool:
    if holder.inactive_slot:
        return True
    if holder.held_seconds is not None:
        return holder.held_seconds > older_than
    return holder.xid_age > xids_over


def _holder(
    kind: str,
    name: str,
    user: str | None,
    application: str | None,
    state: str | None,
    client: str | None,
    held_seconds: float | None,
    xid_age: int | None,
    query: str | None,
    hidden: bool,
) -> Holder:
    return Holder(
        kind=kind,
        name=excerpt(name, NAME_CHARS),
        user=user,
        application=excerpt(application, NAME_CHARS) if application else application,
        state=state,
        client=client,
        held_seconds=None if held_seconds is None else float(held_seconds),
        xid_age=int(xid_age or 0),
        # "<insufficient privilege>" is what the server shows for a hidden one: say it once.
        query=None if hidden or query is None else excerpt(query, QUERY_CHARS),
        hidden=kind == "session" and bool(hidden),
    )


def excerpt(text: str, limit: int) -> str:
    """``text`` on one line, secrets redacted, at most ``limit`` characters.

    The whole text is redacted before it is cut, so that a cut never leaves half a secret
    unrecognised; pg_stat_activity bounds it anyway (``track_activity_query_size``, 1 kB by
    default)."""
    line = " ".join(sanitize(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
