"""Where the console and the metrics view read the job tables, and how far behind that is.

``CONSOLE_DATABASE`` names a streaming replica of the jobs database. While a page of the console
or the metrics view reads (:func:`console_reads`), ``jobs_settings.DATABASE`` is that replica's
alias, so every read of the page goes there — the statements of this package, the diagnosis of
``observe/``, the models' named reads — without each taking an alias. Actions run outside of it,
on the primary; a write that strayed into it would fail, the standby being read-only.

What only the primary knows is read there even during a page (:func:`on_primary`): the vacuum
horizon, whose holders are the primary's sessions and slots.

A page reads the replica's lag once (:data:`LAG`). A replica that cannot be reached is said so,
and the page reads the primary: the console is what an operator opens during an incident, and
a replica down must not take it away.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import DatabaseError, connections

from django_jobs.conf import READING_FROM, jobs_settings, primary_database

logger = logging.getLogger(__name__)

#: Whether the alias is a standby, whether it replayed all the WAL it received, and the age of
#: the newest transaction it replayed (no table read). The age alone would not do: on an idle
#: primary it grows though nothing is missing, so a standby that replayed everything it
#: received is caught up, whatever the age. Both functions answer NULL on a primary, and
#: ``pg_last_wal_receive_lsn()`` on a standby that restores from an archive without streaming.
LAG = """
SELECT pg_is_in_recovery(),
       coalesce(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), false),
       EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())
"""


@dataclass(frozen=True)
class Lag:
    """How far behind the primary the replica a page read from is."""

    alias: str
    #: In recovery: a standby. False: the alias serves writes itself (promoted, or never a
    #: replica), and nothing says it follows the jobs database.
    standby: bool = True
    #: It replayed all the WAL it received.
    caught_up: bool = False
    #: Age of the newest transaction it replayed; None if it replayed none since it started.
    replayed_age: float | None = None
    #: Why it could not be read; the page read the primary instead.
    unreachable: str | None = None

    @property
    def seconds_behind(self) -> float | None:
        """0 when caught up, the replayed age when behind, None when nobody can say."""
        if self.unreachable is not None or not self.standby:
            return None
        if self.caught_up:
            return 0.0
        return self.replayed_age

    @property
    def gauge(self) -> float:
        """:attr:`seconds_behind` for Prometheus, where a value nobody knows is NaN."""
        behind = self.seconds_behind
        return math.nan if behind is None else behind

    @property
    def worrying(self) -> bool:
        """Whether the page should draw the eye: anything but a standby caught up."""
        return self.seconds_behind != 0.0

    def __str__(self) -> str:
        if self.unreachable is not None:
            return f"unreachable ({self.unreachable}); this page read the primary"
        if not self.standby:
            return "not a standby: it is not in recovery, so it may not follow the jobs database"
        behind = self.seconds_behind
        if behind == 0.0:
            return "caught up"
        if behind is None:
            return "behind by an unknown time: it has replayed nothing since it started"
        return f"{behind:.1f} s behind" if behind < 10 else f"{round(behind)} s behind"


def replica_alias() -> str | None:
    """``CONSOLE_DATABASE``, or None when the pages read the primary."""
    alias = jobs_settings.CONSOLE_DATABASE
    return None if alias is None or alias == primary_database() else alias


def read_lag(alias: str) -> Lag:
    """The lag of the database ``alias`` names. Raises ``DatabaseError`` if it cannot be read."""
    with connections[alias].cursor() as cursor:
        cursor.execute(LAG)
        standby, caught_up, age = cursor.fetchone()
    return Lag(alias, bool(standby), bool(caught_up), None if age is None else float(age))


@contextmanager
def console_reads() -> Iterator[Lag | None]:
    """Within: the job tables are read from ``CONSOLE_DATABASE``. Yields its lag (one query), or
    None when the pages read the primary (no query)."""
    alias = replica_alias()
    if alias is None:
        yield None
        return
    try:
        lag = read_lag(alias)
    except DatabaseError as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        logger.warning("console replica unreachable, reading the primary alias=%s error=%s", alias, why)
        lag = Lag(alias, unreachable=why)
    if lag.unreachable is not None:
        yield lag
        return
    token = READING_FROM.set(alias)
    try:
        yield lag
    finally:
        READING_FROM.reset(token)


@contextmanager
def on_primary() -> Iterator[None]:
    """Within: the job tables are read from the primary, even during a page of the console."""
    token = READING_FROM.set(None)
    try:
        yield
    finally:
        READING_FROM.reset(token)
