"""When the claim loop turns: what it hears (LISTEN), what it reads (the outlook), and how long
it may wait when idle.

A worker that runs until stopped listens (:mod:`django_jobs.runtime.listener`): a job made pending
wakes it, a job scheduled for later sets a timer (a heap of due times), a paused queue has its
prefetched jobs given back. What nobody announced — what was scheduled before this worker
started, or while its listener was reconnecting, and the pauses when nobody listens — is read
from the outlook (``transitions.outlook``): at the first turn, after every reconnection, at the
time of the next job it found, and, instead of an empty claim, at the periodic check of an idle
worker. A worker that drains and exits (burst, until settled) polls.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence

from django_jobs import transitions
from django_jobs.conf import jobs_settings
from django_jobs.runtime.listener import Listener
from django_jobs.runtime.pool import ExecutorPool
from django_jobs.runtime.writer import OutcomeWriter
from django_jobs.transitions import ClaimStatement

#: A timer for a scheduled job fires this long after the job is due (the database's clock
#: decides, and the notification left before its commit).
_DUE_MARGIN = 0.005
_MAX_TIMERS = 10_000


class Wakeup:
    def __init__(
        self,
        *,
        queues: Sequence[str],
        statement: ClaimStatement,
        pool: ExecutorPool,
        writer: OutcomeWriter,
        wake: threading.Event,
        stopping: threading.Event,
        paused_heard: Callable[[str], None],
        paused_found: Callable[[set[str]], None],
        burst: bool,
        listen: bool,
    ) -> None:
        self._statement = statement
        self._pool = pool
        self._writer = writer
        self._wake = wake
        self._paused_found = paused_found
        self._burst = burst
        self._lock = threading.Lock()
        # When the scheduled jobs the listener heard of are due (monotonic), earliest first.
        self._due: list[float] = []
        # What the worker reads rather than hears (see look_ahead): wanted at the first turn
        # (what was scheduled before this worker started was announced to nobody) and after
        # every (re)connection of the listener; claim loop only. A worker that drains and
        # exits (burst) waits for nothing scheduled: it reads only the pauses it cannot hear.
        self._outlook_wanted = threading.Event()
        if not burst:
            self._outlook_wanted.set()
        self._outlook_at = 0.0  # monotonic time of the last read
        self._outlook_due: float | None = None  # when the next job it found is due (monotonic)
        self.listener = (
            Listener(
                list(queues),
                wake=wake.set,
                due_in=self.note_due,
                stop=stopping,
                paused=paused_heard,
                connected=self.listener_connected,
            )
            if listen
            else None
        )

    def start(self) -> None:
        if self.listener is not None:
            self.listener.start()

    # ---- what the listener tells ---------------------------------------------------------------

    def note_due(self, seconds: float) -> None:
        """The listener heard of a job due in ``seconds``: claim then, not at the next poll."""
        due = time.monotonic() + seconds + _DUE_MARGIN
        with self._lock:
            heapq.heappush(self._due, due)
            if len(self._due) > _MAX_TIMERS:
                # Forget the latest: the outlook finds them. Keeping every due time of a huge
                # schedule would cost memory for nothing.
                self._due = heapq.nsmallest(_MAX_TIMERS // 2, self._due)
        self._wake.set()

    def listener_connected(self) -> None:
        """The listener (re)connected: what was announced while nobody listened was never heard,
        so claim now and read the outlook (due times, pauses) at this turn."""
        self._outlook_wanted.set()
        self._wake.set()

    # ---- a turn of the claim loop --------------------------------------------------------------

    def claim_and_look(self, woken: bool, claim: Callable[[], int]) -> int:
        """Claim, and read the outlook when it may know what no notification told; returns how
        many jobs were claimed.

        The periodic check of an idle listening worker (every ``POLL_INTERVAL``, when nothing
        woke it and no timer is due) reads the outlook instead of claiming, and claims only if
        a job is due now: an empty claim scans every claim-index entry of jobs not due yet,
        the outlook a few entries (see ``transitions.execution._OUTLOOK``).
        """
        now = time.monotonic()
        timer_fired = self._outlook_timer_fired(now)
        periodic_check = not (woken or timer_fired or self._heard_due(now)) and self._idle_listening()
        if periodic_check and not self.look_ahead():
            return 0
        claimed = claim()
        # After a timer of the outlook, look past the job it was set for.
        if timer_fired or self._outlook_wanted.is_set() or self._pauses_unheard(now):
            self.look_ahead()
        return claimed

    def _outlook_timer_fired(self, now: float) -> bool:
        """Whether the job the last outlook found is due now (the timer is spent)."""
        if self._outlook_due is None or self._outlook_due > now:
            return False
        self._outlook_due = None
        return True

    def _heard_due(self, now: float) -> bool:
        """Whether a scheduled job the listener heard of is due now."""
        with self._lock:
            return bool(self._due) and self._due[0] <= now

    def _listening(self) -> bool:
        return self.listener is not None and self.listener.listening.is_set()

    def _idle_listening(self) -> bool:
        """Listening, and holding nothing: no job buffered, running or waiting to be written."""
        if not self._listening():
            return False
        buffered, running, _ = self._pool.counts()
        return not (buffered or running or self._writer.unwritten)

    def _pauses_unheard(self, now: float) -> bool:
        """Whether prefetched jobs may belong to a queue paused since, with nobody listening for
        pauses (``NOTIFY`` off, or the listener down): read the paused set every POLL_INTERVAL."""
        if self._listening():
            return False
        if now - self._outlook_at < jobs_settings.POLL_INTERVAL:
            return False
        buffered, _, _ = self._pool.counts()
        return buffered > 0

    def look_ahead(self) -> bool:
        """Read the outlook: set a timer for the next job due, give back what was prefetched of
        paused queues. Returns whether a job is due now (one the last claim did not get: it
        became due since, or another worker was claiming it)."""
        # Cleared before the read: a reconnection of the listener during it asks for another.
        self._outlook_wanted.clear()
        try:
            seen = transitions.outlook(self._statement)
        except BaseException:
            self._outlook_wanted.set()  # read it once the database answers again
            raise
        now = self._outlook_at = time.monotonic()
        due_later = seen.due_in is not None and seen.due_in > 0
        # Due now but not claimed: the next periodic check claims it; no timer, or a job that
        # stays unclaimable (its row locked by a long transaction) would spin this loop. A burst
        # worker exits once nothing is claimable: it sets no timer for a job due later.
        timer = seen.due_in is not None and due_later and not self._burst
        self._outlook_due = now + seen.due_in + _DUE_MARGIN if seen.due_in is not None and timer else None
        if seen.paused:
            self._paused_found(set(seen.paused))
        due_now = seen.due_in is not None and not due_later
        if due_now:
            # It may lie before where the claims stopped (see transitions.positions).
            self._statement.positions.want_sweep()
        return due_now

    # ---- how long to wait ----------------------------------------------------------------------

    def idle_wait(self, *, stall: float, holding_back: bool, outage_until: float) -> float:
        """Seconds until the claim loop has something to do, unless woken: the next poll, the
        next job the outlook or the listener said is due, within a quarter of ``stall`` (the
        loop's turns are its sign of life), soon while holding back, and no later than the end
        of a claims outage (``outage_until``, monotonic)."""
        now = time.monotonic()
        # Held jobs need their buffer and slots looked after (the writer wakes this thread once
        # the last outcome is written); without a listener, polling is how new jobs are found;
        # with one, an idle worker reads its outlook this often (see claim_and_look).
        wait = jobs_settings.POLL_INTERVAL
        if self._outlook_due is not None:
            wait = min(wait, max(0.0, self._outlook_due - now))
        with self._lock:
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)  # this turn's claim took what was due
            if self._due:
                wait = min(wait, self._due[0] - now)
        # The loop's turns are its sign of life for the probes: an idle wait stays well within
        # the limit after which a loop that does not turn is presumed hung.
        wait = min(wait, stall / 4)
        if holding_back:
            wait = min(wait, jobs_settings.POLL_INTERVAL)  # look again soon: the heartbeat may answer
        outage_left = outage_until - now
        return min(wait, outage_left) if outage_left > 0 else wait
