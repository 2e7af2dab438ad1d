"""The writes of restore safety: a worker's look at the database's identity (recorded, compared,
a hold opened on a restore's sign), and an operator's declaration of a hold, with its actor and
reason. The comparison itself is ``django_jobs.restoring.judge``; the release of a hold, which
settles the jobs it kept, is ``django_jobs.transitions.restore_release``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db import OperationalError, connections, transaction

from django_jobs.conf import jobs_settings
from django_jobs.models.restore import RestoreHold
from django_jobs.restoring import Identity, RestoreSign, Seen, judge
from django_jobs.transitions.operator import ActionRefused

# What the server says the database is. The timeline is the one WAL is written on now (the first
# eight hex digits of the current segment's name); a server in recovery writes none, and its last
# checkpoint's timeline stands in (a worker connected to a standby claims nothing anyway).
_LIVE = """
SELECT (SELECT system_identifier FROM pg_control_system()),
       (SELECT oid FROM pg_database WHERE datname = current_database()),
       CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
            ELSE ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int END
"""
#: How long a look waits for the record another worker's look holds, at most.
LOOK_LOCK_WAIT = 0.25
#: PostgreSQL's SQLSTATE for a lock not granted within ``lock_timeout``.
LOCK_NOT_AVAILABLE = "55P03"
_LOCK_WAIT = "SELECT set_config('lock_timeout', %s, true)"
_RECORDED = (
    "SELECT system_identifier, database_oid, timeline, generation FROM django_jobs_databaseidentity"
    " WHERE id = 1 FOR UPDATE"
)
_RECORD = """
INSERT INTO django_jobs_databaseidentity
    (id, system_identifier, database_oid, timeline, generation, looked_at)
VALUES (1, %(system)s, %(oid)s, %(timeline)s, %(generation)s, now())
ON CONFLICT (id) DO UPDATE SET system_identifier = EXCLUDED.system_identifier,
    database_oid = EXCLUDED.database_oid, timeline = EXCLUDED.timeline,
    generation = EXCLUDED.generation, looked_at = now()
"""
# The partial unique index refuses a second open hold: the first sign of a restore is kept.
_OPEN = """
INSERT INTO django_jobs_restorehold (kind, evidence, opened_by, opened_at) VALUES (%s, %s, %s, now())
ON CONFLICT DO NOTHING RETURNING id
"""
_OPEN_HOLD = (
    "SELECT id, kind, evidence, opened_by, opened_at FROM django_jobs_restorehold WHERE released_at IS NULL"
)
# A restored database hands out again the job ids the lost jobs had: a key built from a job id
# (``ctx.idempotency_key()`` on a job without a unique key) would name, at the provider, a lost
# job's operation. Opening a hold moves the id sequence past what a lost timeline plausibly
# used. ``setval`` is not undone by a rollback: a hold that fails to open still moved it, which
# costs nothing.
ID_JUMP = 10**9
_JUMP_IDS = """
SELECT setval(s.seq, GREATEST(coalesce(pg_sequence_last_value(s.seq), 0),
                              (SELECT coalesce(max(id), 0) FROM django_jobs_job)) + %s)
FROM (SELECT pg_get_serial_sequence('django_jobs_job', 'id')::regclass AS seq) AS s
"""
_ANY_OPEN = "SELECT EXISTS (SELECT 1 FROM django_jobs_restorehold WHERE released_at IS NULL)"
# The look of a worker that finds the database as recorded, in one statement (one of a heartbeat
# turn's three): the server's identity is the recorded one in every part, and the record is not
# behind the generation this worker saw, so there is nothing to judge; the record goes one
# generation on. Anything else (no record yet, any part changed, behind) is the whole look's to
# judge (``_look``); a record another look holds this instant is skipped (SKIP LOCKED: no lock is
# waited for here, and the caller tries again within LOOK_LOCK_WAIT).
_LOOK_UNCHANGED = f"""
WITH live AS ({_LIVE.strip()}),
rec AS (SELECT * FROM django_jobs_databaseidentity WHERE id = 1 FOR UPDATE SKIP LOCKED),
bumped AS (UPDATE django_jobs_databaseidentity d SET generation = rec.generation + 1, looked_at = now()
           FROM rec, live l(system, oid, timeline)
           WHERE d.id = 1 AND rec.system_identifier = l.system AND rec.database_oid = l.oid
             AND rec.timeline = l.timeline AND rec.generation >= %(witnessed)s
           RETURNING d.generation)
SELECT live.*, (SELECT generation FROM bumped),
       NOT EXISTS (SELECT FROM rec) AND EXISTS (SELECT FROM django_jobs_databaseidentity WHERE id = 1),
       EXISTS (SELECT FROM django_jobs_restorehold WHERE released_at IS NULL)
FROM live
"""


@dataclass(frozen=True, slots=True)
class Look:
    """What one look found: what the worker has now seen, the sign of a restore if this look
    found one, and whether a hold is open (found now, or before, or declared)."""

    seen: Seen
    sign: RestoreSign | None
    #: The hold this look opened; None if it opened none (no sign, or one was open already).
    opened: int | None
    held: bool


def live_identity() -> Identity:
    """What the server says the jobs database is."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        return _read_live(cursor)


def _read_live(cursor: Any) -> Identity:
    cursor.execute(_LIVE)
    system, oid, timeline = cursor.fetchone()
    return Identity(system_identifier=int(system), database_oid=int(oid), timeline=int(timeline))


def look(witness: Seen | None, worker_id: str) -> Look | None:
    """Compare the database's recorded identity with the server's and with ``witness`` (what
    this worker saw at its last look), record what it is now one generation on, and open a hold
    on a restore's sign, the record locked, so that workers looking at once judge one after the
    other. A database found as recorded takes one statement (``_LOOK_UNCHANGED``); anything to
    judge takes a transaction (``_look``).

    None when the record stayed locked for ``LOOK_LOCK_WAIT``: another worker froze inside its
    own look (a SIGSTOP, a paused VM) and holds it. This look is skipped, and the next one tries
    again. A look runs on the heartbeat's thread: waiting for the frozen worker, every worker's
    leases would go unrenewed until that one was continued or PostgreSQL ended its session.
    """
    alias = jobs_settings.DATABASE
    give_up = time.monotonic() + LOOK_LOCK_WAIT
    while (found := _look_unchanged(alias, witness)) is _HELD and time.monotonic() < give_up:
        time.sleep(0.01)
    if isinstance(found, Look):
        return found
    if found is _HELD:
        return None
    try:
        return _look(alias, witness, worker_id)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return None


#: What ``_look_unchanged`` returns when the record may be held by another look this instant.
_HELD = object()


def _look_unchanged(alias: str, witness: Seen | None) -> Look | object | None:
    """The look in one statement, when everything is as recorded; None when there is something
    to judge (the whole look's work), ``_HELD`` when the record may be another look's now."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_LOOK_UNCHANGED, {"witnessed": 0 if witness is None else witness.generation})
        system, oid, timeline, generation, maybe_held, held = cursor.fetchone()
    if generation is not None:
        live = Identity(system_identifier=int(system), database_oid=int(oid), timeline=int(timeline))
        return Look(seen=Seen(live, int(generation)), sign=None, opened=None, held=bool(held))
    # A record that exists but was not returned is another look's this instant: ask again.
    return _HELD if maybe_held else None


def _look(alias: str, witness: Seen | None, worker_id: str) -> Look:
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        # For this transaction only: safe on a connection a transaction pool lends to others.
        cursor.execute(_LOCK_WAIT, [f"{round(LOOK_LOCK_WAIT * 1000)}ms"])
        live = _read_live(cursor)
        cursor.execute(_RECORDED)
        row = cursor.fetchone()
        recorded = None if row is None else Seen(Identity(int(row[0]), int(row[1]), int(row[2])), int(row[3]))
        sign = judge(recorded, live, witness)
        generation = (recorded.generation if recorded is not None else 0) + 1
        # Two first looks at once: the second's INSERT waits for the first's and updates its row.
        cursor.execute(
            _RECORD,
            {
                "system": live.system_identifier,
                "oid": live.database_oid,
                "timeline": live.timeline,
                "generation": generation,
            },
        )
        opened = None
        if sign is not None:
            cursor.execute(_OPEN, [sign.kind, sign.evidence, worker_id])
            found = cursor.fetchone()
            opened = None if found is None else int(found[0])
            if opened is not None:
                cursor.execute(_JUMP_IDS, [ID_JUMP])
        cursor.execute(_OPEN_HOLD)
        held = cursor.fetchone() is not None
    return Look(seen=Seen(live, generation), sign=sign, opened=opened, held=held)


def hold_open() -> bool:
    """Whether a restore hold is open now (one read of a one-row index)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_ANY_OPEN)
        return bool(cursor.fetchone()[0])


def declare(*, actor: str, reason: str) -> int:
    """Open a hold for a restore the workers cannot see. Raises ``ActionRefused`` if one is open."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(_OPEN, [RestoreHold.Kind.DECLARED, reason, actor])
        row = cursor.fetchone()
        if row is None:
            raise ActionRefused("a restore hold is open already: release it first, or keep it")
        cursor.execute(_JUMP_IDS, [ID_JUMP])
    return int(row[0])
