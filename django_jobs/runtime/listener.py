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

``DJANGO_JOBS["NOTIFY"] = False`` turns this off (polling only): LISTEN needs a session of its
own, which PgBouncer in transaction mode cannot give.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.db import connections

from django_jobs.conf import jobs_settings

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

    def run(self) -> None:
        wait = _RECONNECT_FIRST
        while not self._stop_event.is_set():
            try:
                with psycopg.connect(**_connection_params(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    wait = _RECONNECT_FIRST
                    self._connected()  # what was announced while nobody listened was never heard
                    self._listen(conn)
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

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        quiet_since = time.monotonic()
        while not self._stop_event.is_set():
            # A short timeout so that a stopping worker is not kept waiting.
            for notification in conn.notifies(timeout=0.5):
                self._hear(notification.payload)
                quiet_since = time.monotonic()
            if time.monotonic() - quiet_since >= KEEPALIVE:
                conn.execute("SELECT 1")
                quiet_since = time.monotonic()

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


def _connection_params() -> dict[str, Any]:
    """The jobs database's connection parameters, as Django would connect."""
    params: dict[str, Any] = connections[jobs_settings.DATABASE].get_connection_params()
    # Django's cursor classes and adapters are for its own connections; this one only listens.
    for key in ("cursor_factory", "context", "server_side_binding"):
        params.pop(key, None)
    return params
