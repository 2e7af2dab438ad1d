"""The worker's ear: one connection that LISTENs on the ``django_jobs`` channel.

Triggers on the job table (migration 0005) notify whenever a job becomes pending: the payload
is its queue, followed by the seconds until it is due when it is not due yet. The listener
wakes the worker's claim loop for a job due now in a queue it serves, and tells it when the
next scheduled one will be due, so an idle worker starts a job milliseconds after it is
enqueued or due, without claiming in a loop. A resumed queue wakes it too; a paused one is
reported, so the worker gives back what it prefetched of it (the claim itself skips paused
queues).

Notifications on a live connection are not lost, but nothing announced while nobody listened
is ever heard: jobs scheduled before the worker started, and whatever became pending, was
scheduled or was paused while the connection was down. So the listener is never the only
source: at each (re)connection the worker claims at once and reads its *outlook* from the
database (the next due time among the jobs it could claim, and the paused queues; one cheap
indexed read, ``transitions.outlook``), and an idle worker reads it again every
``POLL_INTERVAL``. A connection that dies is reconnected with a back-off; while it is down the
worker polls every ``POLL_INTERVAL``, and reads the paused queues as often while it holds
prefetched jobs. So a job waits at most ``POLL_INTERVAL`` whatever happens to the connection,
and a scheduled job the worker could not hear of starts when it is due.

``DJANGO_JOBS["NOTIFY"] = False`` turns this off (polling only). LISTEN needs a session of its
own, which a pooler in transaction mode cannot give: the LISTEN would stay on a server
connection that other clients get, and this one would hear nothing. So the listener connects
to ``LISTEN_DATABASE`` when it is set (an alias that reaches PostgreSQL directly), and does not
LISTEN on an alias declared pooled in transaction mode, nor through such a pooler it finds
(``runtime.pooler``): it says so, and the worker polls as with ``NOTIFY`` off. At each
keepalive it checks that its session still runs on the server process that took its LISTEN: a
pooler that passed for a session pool at first is found out there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from django_jobs.conf import jobs_settings
from django_jobs.runtime.pooler import Pooling, connection_params, pooling_of, server_pid
from django_jobs.transitions.cursor import transaction_pooled

logger = logging.getLogger("django_jobs.listener")

CHANNEL = "django_jobs"
#: A pause or a resume of a queue (migration 0006): ``!paused NAME`` or ``!resumed NAME``. No
#: queue name starts with "!", so these are never taken for a queue with new jobs.
QUEUE_STATE_MARK = "!"
QUEUE_PAUSED, QUEUE_RESUMED = "!paused", "!resumed"
#: A silent connection is checked (SELECT 1) this often: a peer gone without a word (a dropped
#: network path) would otherwise keep the listener waiting forever.
KEEPALIVE = 30.0
_RECONNECT_FIRST, _RECONNECT_MAX = 0.1, 5.0


class Listener(threading.Thread):
    """Hears the job channel for a worker serving ``queues`` (empty: every queue)."""

    def __init__(
        self,
        queues: Sequence[str],
        *,
        wake: Callable[[], None],
        due_in: Callable[[float], None],
        stop: threading.Event,
        paused: Callable[[str], None] | None = None,
        connected: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="django_jobs-listener", daemon=True)
        self._queues = frozenset(queues)
        self._wake = wake
        self._due_in = due_in
        self._paused = paused
        self._connected = connected or wake
        self._stop_event = stop
        #: Set while LISTEN is in place on a live connection: the worker may then stop polling.
        self.listening = threading.Event()
        self.reconnects = 0
        #: Set once the listener found a pooler in transaction mode and gave up: the worker polls.
        self.pooled = threading.Event()

    def run(self) -> None:
        wait = _RECONNECT_FIRST
        alias = jobs_settings.LISTEN_DATABASE or jobs_settings.DATABASE
        if transaction_pooled(alias):
            self._give_up(alias)
            return
        while not self._stop_event.is_set():
            try:
                params = connection_params(alias)
                with psycopg.connect(**params, autocommit=True) as conn:
                    if pooling_of(conn, params) is Pooling.TRANSACTIONS:
                        self._give_up(alias)
                        return
                    # The process that takes the LISTEN, on a session that keeps its server:
                    # the keepalives must find it again.
                    server = server_pid(conn)
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    wait = _RECONNECT_FIRST
                    self._connected()  # what was announced while nobody listened was never heard
                    if not self._listen(conn, server):
                        self._give_up(alias)
                        return
            except psycopg.Error as exc:
                if self._stop_event.is_set():
                    break
                logger.warning(
                    "listening connection lost (%s): polling every %.1fs, reconnecting in %.1fs",
                    type(exc).__name__, jobs_settings.POLL_INTERVAL, wait,
                )  # fmt: skip
            finally:
                self.listening.clear()
            self.reconnects += 1
            self._stop_event.wait(wait)
            wait = min(_RECONNECT_MAX, wait * 2)

    def _listen(self, conn: psycopg.Connection[Any], server: int) -> bool:
        """Hear notifications until stopped (True), or until the session is found to have
        moved to another server process (False: a transaction pooler lent it another)."""
        quiet_since = time.monotonic()
        while not self._stop_event.is_set():
            # A short timeout so that a stopping worker is not kept waiting.
            for notification in conn.notifies(timeout=0.5):
                self._hear(notification.payload)
                quiet_since = time.monotonic()
            if time.monotonic() - quiet_since >= KEEPALIVE:
                if server_pid(conn) != server:
                    return False
                quiet_since = time.monotonic()
        return True

    def _give_up(self, alias: str) -> None:
        self.listening.clear()
        self.pooled.set()
        logger.warning(
            "database %r goes through a connection pooler in transaction mode, which cannot hold a"
            " LISTEN: not listening, polling every %.1fs; set DJANGO_JOBS['LISTEN_DATABASE'] to an"
            " alias that connects to PostgreSQL directly (or NOTIFY = False to say so)",
            alias, jobs_settings.POLL_INTERVAL,
        )  # fmt: skip

    def _hear(self, payload: str) -> None:
        if payload.startswith(QUEUE_STATE_MARK):
            self._hear_queue_state(payload)
            return
        queue, _, due_in = payload.partition(" ")
        if self._queues and queue not in self._queues:
            return
        if not due_in:
            self._wake()
            return
        try:
            seconds = float(due_in)
        except ValueError:
            return  # not ours: someone else NOTIFYs on the channel
        self._due_in(max(0.0, seconds))

    def _hear_queue_state(self, payload: str) -> None:
        state, _, queue = payload.partition(" ")
        if self._queues and queue not in self._queues:
            return
        if state == QUEUE_RESUMED:
            self._wake()  # its jobs waited: claim them now, not at the next poll
        elif state == QUEUE_PAUSED and self._paused is not None:
            self._paused(queue)
