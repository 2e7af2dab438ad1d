"""Whether the database a worker meets is the one the workers left: the signs a restore leaves.

After a backup is restored, every job that ran after the backup looks pending or running again.
Running it again is right for an effect inside the database (the restore took the effect back
with its ledger key) and wrong for one outside it (a card charged, a mail sent): the restore
erased the memory of it, not the effect. So the workers compare the database's identity as they
last recorded it (a row the restore brings back as it was at the backup) with what the server
says now, and with what they saw themselves before a reconnect. This module is the comparison;
``django_jobs.transitions.restore`` reads and writes, the worker looks at start and at every
heartbeat turn.

The signs, in the order they are judged:

* **recreated**: the database's OID is not the recorded one. A dump restored into a re-created
  database, or a copy (``CREATE DATABASE … TEMPLATE``, a dump of production loaded elsewhere).
* **went back**: this worker saw a generation (raised at every look) that the database no longer
  reaches: a restore to an earlier point, or a failover to a replica that lost commits, while the
  worker ran.
* **new timeline**: the server's WAL timeline is not the recorded one, and no worker that ran
  across the change vouches for it: a point-in-time recovery, or a failover while no worker ran.
  A worker that ran across a failover and finds everything it saw vouches for it: no hold.

A new system identifier alone (the same database OID) is ``pg_upgrade``'s mark: the cluster is
new, the data the same (PostgreSQL 15 keeps database OIDs across an upgrade). A base backup
started on the same timeline, with no worker running across it, leaves no sign: the operator
declares it (``manage.py jobsrestore --declare``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import TextChoices


class RestoreKind(TextChoices):
    """Why a restore hold was opened."""

    RECREATED = "recreated", "Database re-created (a dump restored, or a copy)"
    WENT_BACK = "went_back", "Database behind what a worker saw"
    NEW_TIMELINE = "new_timeline", "New timeline that no worker saw begin"
    DECLARED = "declared", "Declared by an operator"


@dataclass(frozen=True, slots=True)
class Identity:
    """What PostgreSQL says the database is."""

    system_identifier: int
    database_oid: int
    timeline: int

    def describe(self) -> str:
        return f"database OID {self.database_oid}, system {self.system_identifier}, timeline {self.timeline}"


@dataclass(frozen=True, slots=True)
class Seen:
    """The database's identity and generation, as recorded in it or as a worker last saw them."""

    identity: Identity
    generation: int


@dataclass(frozen=True, slots=True)
class RestoreSign:
    kind: RestoreKind
    evidence: str


def judge(recorded: Seen | None, live: Identity, witness: Seen | None) -> RestoreSign | None:
    """The sign of a restore, if there is one, from what the database recorded (None: nobody
    looked yet), what the server says now, and what this worker saw at its last look (None: it
    has not looked yet)."""
    if recorded is None:
        if witness is None:
            return None  # the first look of all
        return RestoreSign(
            RestoreKind.WENT_BACK,
            f"this worker saw generation {witness.generation} ({witness.identity.describe()}); the "
            "database holds no record of it any more: restored from before the first worker looked",
        )
    was = recorded.identity
    if was.database_oid != live.database_oid:
        return RestoreSign(
            RestoreKind.RECREATED,
            f"the database was recorded as OID {was.database_oid} and is now OID {live.database_oid}: "
            "it was re-created (a dump restored into it) or copied",
        )
    if witness is not None and recorded.generation < witness.generation:
        return RestoreSign(
            RestoreKind.WENT_BACK,
            f"this worker saw generation {witness.generation} ({witness.identity.describe()}); the "
            f"database holds generation {recorded.generation} ({live.describe()}): it lost commits "
            "the worker saw (restored to an earlier point, or a failover to a replica behind)",
        )
    if was.timeline != live.timeline and witness is None:
        return RestoreSign(
            RestoreKind.NEW_TIMELINE,
            f"the server moved from timeline {was.timeline} to {live.timeline} and no worker saw it "
            "happen: a point-in-time recovery, or a failover while no worker ran",
        )
    return None
